-- Parley's first schema. Times are timestamptz (UTC, microseconds); payloads are json (stored
-- verbatim, so the bytes the agent hashed are the bytes it reads back).
CREATE TABLE users (
	id            text PRIMARY KEY,
	name          text NOT NULL UNIQUE,
	role          text NOT NULL,
	password_hash bytea,
	created_at    timestamptz NOT NULL
);

CREATE TABLE sessions (
	token_hash bytea PRIMARY KEY,
	user_id    text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	csrf       text NOT NULL,
	expires_at timestamptz NOT NULL,
	created_at timestamptz NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);

CREATE TABLE api_tokens (
	id           text PRIMARY KEY,
	user_id      text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	name         text NOT NULL,
	hash         bytea NOT NULL UNIQUE,
	created_at   timestamptz NOT NULL,
	last_used_at timestamptz,
	revoked_at   timestamptz
);
CREATE INDEX api_tokens_user ON api_tokens (user_id, created_at);

CREATE TABLE settings (
	key   text PRIMARY KEY,
	value text NOT NULL
);

CREATE TABLE conversations (
	id         text PRIMARY KEY,
	owner_id   text NOT NULL,
	title      text NOT NULL,
	status     text NOT NULL,
	last_seq   bigint NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL
) WITH (fillfactor = 70);
-- Every append updates last_seq and updated_at: neither is indexed, and pages keep free space,
-- so the update is HOT (no index writes). Lists per owner are short and sorted in memory.
CREATE INDEX conversations_owner ON conversations (owner_id);
CREATE INDEX conversations_active ON conversations (status) WHERE status <> 'idle';

CREATE TABLE entries (
	conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	seq             bigint NOT NULL,
	type            text NOT NULL,
	tool_call_id    text NOT NULL,
	actor           text NOT NULL,
	data            json,
	created_at      timestamptz NOT NULL,
	PRIMARY KEY (conversation_id, seq)
);
-- A call is logged once.
CREATE UNIQUE INDEX entries_one_tool_call ON entries (conversation_id, tool_call_id) WHERE type = 'tool_call';

CREATE TABLE tool_calls (
	conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	tool_call_id    text NOT NULL,
	name            text NOT NULL,
	executor        text NOT NULL,
	approval        text NOT NULL,
	approvers       text NOT NULL,
	status          text NOT NULL,
	pending_kind    text NOT NULL,
	args            json,
	result          json,
	prompt          json,
	expires_at      timestamptz,
	seq             bigint NOT NULL,
	created_at      timestamptz NOT NULL,
	updated_at      timestamptz NOT NULL,
	PRIMARY KEY (conversation_id, tool_call_id)
);
-- ListPending: status = 'awaiting' [AND pending_kind = …] ORDER BY created_at DESC.
CREATE INDEX tool_calls_pending ON tool_calls (status, pending_kind, created_at DESC);

CREATE TABLE expiries (
	conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	tool_call_id    text NOT NULL,
	at              timestamptz NOT NULL,
	claimed_until   timestamptz,
	PRIMARY KEY (conversation_id, tool_call_id)
);
CREATE INDEX expiries_due ON expiries (at);

CREATE TABLE steps (
	conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	key             text NOT NULL,
	attempts        bigint NOT NULL,
	next_attempt_at timestamptz,
	last_error      text NOT NULL,
	updated_at      timestamptz NOT NULL,
	PRIMARY KEY (conversation_id, key)
);

CREATE TABLE outbox (
	id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	conversation_id text NOT NULL,
	tool_call_id    text NOT NULL UNIQUE,
	to_addr         text NOT NULL,
	subject         text NOT NULL,
	body            text NOT NULL,
	created_at      timestamptz NOT NULL
);
CREATE INDEX outbox_conversation ON outbox (conversation_id, id);

CREATE TABLE audit (
	id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	conversation_id text NOT NULL,
	tool_call_id    text NOT NULL,
	tool            text NOT NULL,
	actor_id        text NOT NULL,
	action          text NOT NULL,
	reason          text NOT NULL,
	args_hash       text NOT NULL,
	at              timestamptz NOT NULL
);
CREATE INDEX audit_conversation ON audit (conversation_id, at DESC);
CREATE INDEX audit_actor ON audit (actor_id, at DESC);

-- parley_advance is Append's sequence check, run first in the same transaction as the batch's
-- writes: it moves the log from after_seq to new_last (stamping and, when new_status is not
-- empty, setting the status) or raises — PY409 when the log is elsewhere (another writer won),
-- P0002 when the conversation does not exist — which aborts everything queued after it. Raising
-- inside the server lets the whole append travel as one pipelined round trip.
CREATE FUNCTION parley_advance(conv text, after_seq bigint, new_last bigint, at timestamptz, new_status text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	cur bigint;
BEGIN
	UPDATE conversations SET last_seq = new_last, updated_at = at, status = COALESCE(NULLIF(new_status, ''), status)
	WHERE id = conv AND last_seq = after_seq;
	IF FOUND THEN
		RETURN;
	END IF;
	SELECT last_seq INTO cur FROM conversations WHERE id = conv;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'conversation % does not exist', conv USING ERRCODE = 'P0002';
	END IF;
	RAISE EXCEPTION 'log is at %, not %', cur, after_seq USING ERRCODE = 'PY409';
END
$$;
