-- Parley's first embedded schema, the SQLite twin of postgres/001_init.up.sql. Times are INTEGER
-- microseconds since the Unix epoch, UTC.
CREATE TABLE users (
	id            TEXT PRIMARY KEY,
	name          TEXT NOT NULL UNIQUE,
	role          TEXT NOT NULL,
	password_hash BLOB,
	created_at    INTEGER NOT NULL
);

CREATE TABLE sessions (
	token_hash BLOB PRIMARY KEY,
	user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	csrf       TEXT NOT NULL,
	expires_at INTEGER NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);

CREATE TABLE api_tokens (
	id           TEXT PRIMARY KEY,
	user_id      TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	name         TEXT NOT NULL,
	hash         BLOB NOT NULL UNIQUE,
	created_at   INTEGER NOT NULL,
	last_used_at INTEGER,
	revoked_at   INTEGER
);
CREATE INDEX api_tokens_user ON api_tokens (user_id, created_at);

CREATE TABLE settings (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);

CREATE TABLE conversations (
	id         TEXT PRIMARY KEY,
	owner_id   TEXT NOT NULL,
	title      TEXT NOT NULL,
	status     TEXT NOT NULL,
	last_seq   INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);
CREATE INDEX conversations_owner ON conversations (owner_id);
CREATE INDEX conversations_active ON conversations (status) WHERE status <> 'idle';

CREATE TABLE entries (
	conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	seq             INTEGER NOT NULL,
	type            TEXT NOT NULL,
	tool_call_id    TEXT NOT NULL,
	actor           TEXT NOT NULL,
	data            BLOB,
	created_at      INTEGER NOT NULL,
	PRIMARY KEY (conversation_id, seq)
) WITHOUT ROWID;
-- A call is logged once.
CREATE UNIQUE INDEX entries_one_tool_call ON entries (conversation_id, tool_call_id) WHERE type = 'tool_call';

CREATE TABLE tool_calls (
	conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	tool_call_id    TEXT NOT NULL,
	name            TEXT NOT NULL,
	executor        TEXT NOT NULL,
	approval        TEXT NOT NULL,
	approvers       TEXT NOT NULL,
	status          TEXT NOT NULL,
	pending_kind    TEXT NOT NULL,
	args            BLOB,
	result          BLOB,
	prompt          BLOB,
	expires_at      INTEGER,
	seq             INTEGER NOT NULL,
	created_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL,
	PRIMARY KEY (conversation_id, tool_call_id)
);
CREATE INDEX tool_calls_pending ON tool_calls (status, pending_kind, created_at);

CREATE TABLE expiries (
	conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	tool_call_id    TEXT NOT NULL,
	at              INTEGER NOT NULL,
	claimed_until   INTEGER,
	PRIMARY KEY (conversation_id, tool_call_id)
);
CREATE INDEX expiries_due ON expiries (at);

CREATE TABLE steps (
	conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	key             TEXT NOT NULL,
	attempts        INTEGER NOT NULL,
	next_attempt_at INTEGER,
	last_error      TEXT NOT NULL,
	updated_at      INTEGER NOT NULL,
	PRIMARY KEY (conversation_id, key)
);

CREATE TABLE outbox (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	conversation_id TEXT NOT NULL,
	tool_call_id    TEXT NOT NULL UNIQUE,
	to_addr         TEXT NOT NULL,
	subject         TEXT NOT NULL,
	body            TEXT NOT NULL,
	created_at      INTEGER NOT NULL
);
CREATE INDEX outbox_conversation ON outbox (conversation_id, id);

CREATE TABLE audit (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	conversation_id TEXT NOT NULL,
	tool_call_id    TEXT NOT NULL,
	tool            TEXT NOT NULL,
	actor_id        TEXT NOT NULL,
	action          TEXT NOT NULL,
	reason          TEXT NOT NULL,
	args_hash       TEXT NOT NULL,
	at              INTEGER NOT NULL
);
CREATE INDEX audit_conversation ON audit (conversation_id, at);
CREATE INDEX audit_actor ON audit (actor_id, at);
