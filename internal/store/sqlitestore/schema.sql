-- Parley's embedded schema, the SQLite twin of migrations/*.up.sql. Times are INTEGER microseconds
-- since the Unix epoch, UTC. PRAGMA user_version records the schema version.
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
	revoked_at   INTEGER,
	scope        TEXT NOT NULL DEFAULT 'full',
	expires_at   INTEGER
);
CREATE INDEX api_tokens_user ON api_tokens (user_id, created_at);

CREATE TABLE invitations (
	id         TEXT PRIMARY KEY,
	hash       BLOB NOT NULL UNIQUE,
	role       TEXT NOT NULL,
	created_by TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	used_at    INTEGER,
	used_by    TEXT,
	revoked_at INTEGER
);
CREATE INDEX invitations_created ON invitations (created_at);

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
	updated_at INTEGER NOT NULL,
	-- The log's entries up to here are in the search index (message_text, below); an append only
	-- moves last_seq past it.
	indexed_seq INTEGER NOT NULL DEFAULT 0
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
	tool_call_id    TEXT NOT NULL,
	to_addr         TEXT NOT NULL,
	subject         TEXT NOT NULL,
	body            TEXT NOT NULL,
	created_at      INTEGER NOT NULL,
	UNIQUE (conversation_id, tool_call_id)
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
	at              INTEGER NOT NULL,
	detail          TEXT NOT NULL DEFAULT '',
	chain_seq       INTEGER,
	prev_hash       TEXT NOT NULL DEFAULT '',
	hash            TEXT NOT NULL DEFAULT '',
	key_id          TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_conversation ON audit (conversation_id, at);
CREATE INDEX audit_actor ON audit (actor_id, at);
CREATE UNIQUE INDEX audit_chain_seq ON audit (chain_seq);
CREATE INDEX audit_action ON audit (action, chain_seq);
-- The audit trail is a keyed hash chain (store/auditkey.go; PostgreSQL's twin is migration 019):
-- key_id names the key a record was linked with, empty for the unkeyed records of a file from
-- before version 9. The file refuses to change or remove a record (a conversation's deletion
-- leaves its records); whoever can write the file can drop these triggers, and the key and the
-- anchor are what show that.
CREATE INDEX audit_unkeyed ON audit (chain_seq) WHERE key_id = '';
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN
	SELECT RAISE(ABORT, 'the audit trail is append-only: UPDATE on audit refused');
END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit BEGIN
	SELECT RAISE(ABORT, 'the audit trail is append-only: DELETE on audit refused');
END;

CREATE TABLE grants (
	id              TEXT PRIMARY KEY,
	user_id         TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	tool            TEXT NOT NULL,
	scope           TEXT NOT NULL,
	conversation_id TEXT NOT NULL,
	tool_call_id    TEXT NOT NULL,
	created_by      TEXT NOT NULL,
	created_at      INTEGER NOT NULL,
	expires_at      INTEGER NOT NULL,
	revoked_at      INTEGER
);
CREATE INDEX grants_user_tool ON grants (user_id, tool, expires_at);

CREATE TABLE inbox_claims (
	conversation_id TEXT NOT NULL,
	tool_call_id    TEXT NOT NULL,
	user_id         TEXT NOT NULL,
	claimed_at      INTEGER NOT NULL,
	expires_at      INTEGER NOT NULL,
	PRIMARY KEY (conversation_id, tool_call_id)
);
CREATE INDEX inbox_claims_expires ON inbox_claims (expires_at);

CREATE TABLE notify_outbox (
	id              TEXT PRIMARY KEY,
	payload         TEXT NOT NULL,
	created_at      INTEGER NOT NULL,
	attempts        INTEGER NOT NULL DEFAULT 0,
	next_attempt_at INTEGER NOT NULL,
	claimed_until   INTEGER,
	last_error      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX notify_outbox_due ON notify_outbox (next_attempt_at);

CREATE TABLE usage (
	user_id TEXT NOT NULL,
	day     TEXT NOT NULL,
	tokens  INTEGER NOT NULL,
	PRIMARY KEY (user_id, day)
);

-- Search over messages (store.FindConversations; PostgreSQL's twin is migration 009): the text
-- of each user and assistant message (its first 100 000 characters, the excerpt markers
-- removed) and an FTS5 index over it kept by triggers (external content). Since version 8 the
-- text is written OUTSIDE the append's transaction (index.go): an append moves the
-- conversation's last_seq past its indexed_seq, and the entries in between are copied here,
-- many per transaction, by the next search of the owner (before it reads: search stays
-- read-your-writes) or by the background indexer shortly after the append, whichever comes
-- first; indexed_seq moves in the same transaction as the rows it covers, so nothing appended
-- is missed after a crash. No index lists the pending conversations: one would cost every
-- append a page (a search checks its owner's rows; the indexer is told of appends in memory
-- and looks through the table on start). Version 7 and before wrote the row in the append's own statement
-- (a trigger on entries), which cost a message's append about one more commit's worth of work
-- (FTS5 flushing a new segment at every commit; docs/benchmarks.md). Deleting a conversation
-- cascades to message_text, whose trigger takes the rows out of the index, and takes its
-- unindexed entries with it. unicode61 without diacritics removal folds case and nothing
-- else, as PostgreSQL's 'simple'.
CREATE TABLE message_text (
	id              INTEGER PRIMARY KEY,
	conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	seq             INTEGER NOT NULL,
	body            TEXT NOT NULL,
	UNIQUE (conversation_id, seq)
);
CREATE VIRTUAL TABLE message_search USING fts5 (body, content = 'message_text', content_rowid = 'id',
	tokenize = 'unicode61 remove_diacritics 0');
CREATE TRIGGER message_text_ai AFTER INSERT ON message_text BEGIN
	INSERT INTO message_search (rowid, body) VALUES (new.id, new.body);
END;
CREATE TRIGGER message_text_ad AFTER DELETE ON message_text BEGIN
	INSERT INTO message_search (message_search, rowid, body) VALUES ('delete', old.id, old.body);
END;
CREATE TRIGGER entries_search_ad AFTER DELETE ON entries WHEN old.type IN ('user_message', 'assistant_message') BEGIN
	DELETE FROM message_text WHERE conversation_id = old.conversation_id AND seq = old.seq;
END;
