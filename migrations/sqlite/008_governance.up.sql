-- Approval governance: audit records carry their particulars and form a hash chain (the single
-- writer chains them in Go); grants remember approvals.
ALTER TABLE audit ADD COLUMN detail TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN chain_seq INTEGER;
ALTER TABLE audit ADD COLUMN prev_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN hash TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX audit_chain_seq ON audit (chain_seq);
CREATE INDEX audit_unchained ON audit (id) WHERE chain_seq IS NULL;
CREATE INDEX audit_action ON audit (action, chain_seq);
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
