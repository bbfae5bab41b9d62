-- Reviewer inbox claims and the durable notification outbox.

-- inbox_claims: "rita is looking at this" on a pending approval. It informs the other
-- reviewers and blocks nobody; it ends at expires_at (a row past it is dead and is replaced by
-- the next claim of the call) or when its holder releases it. A decided call leaves the inbox,
-- and its claim with it.
CREATE TABLE inbox_claims (
	conversation_id text NOT NULL,
	tool_call_id    text NOT NULL,
	user_id         text NOT NULL,
	claimed_at      timestamptz NOT NULL,
	expires_at      timestamptz NOT NULL,
	PRIMARY KEY (conversation_id, tool_call_id)
);
CREATE INDEX inbox_claims_expires ON inbox_claims (expires_at);

-- notify_outbox: approval notifications waiting for the operator's webhook. id is the
-- Standard Webhooks webhook-id, the same on every attempt. A sender claims due rows with a
-- lease (claimed_until, FOR UPDATE SKIP LOCKED), so with several processes each is posted by
-- one at a time; a delivered row is deleted, a failed one waits until next_attempt_at.
CREATE TABLE notify_outbox (
	id              text PRIMARY KEY,
	payload         text NOT NULL,
	created_at      timestamptz NOT NULL,
	attempts        integer NOT NULL DEFAULT 0,
	next_attempt_at timestamptz NOT NULL,
	claimed_until   timestamptz,
	last_error      text NOT NULL DEFAULT ''
);
CREATE INDEX notify_outbox_due ON notify_outbox (next_attempt_at);
