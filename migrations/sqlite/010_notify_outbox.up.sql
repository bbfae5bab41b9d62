-- Reviewer inbox claims and the durable notification outbox (postgres/010 says what each is).
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
