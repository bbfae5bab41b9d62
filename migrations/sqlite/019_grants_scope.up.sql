-- Grants are scoped to the arguments they were given for: 'exact' (args_hash) or 'any'. SQLite
-- cannot add a CHECK to a table, so the table is rebuilt; the grants made so far covered any
-- arguments and stay 'any'.
CREATE TABLE grants_v2 (
	id              TEXT PRIMARY KEY,
	user_id         TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	tool            TEXT NOT NULL,
	scope           TEXT NOT NULL,
	conversation_id TEXT NOT NULL,
	tool_call_id    TEXT NOT NULL,
	created_by      TEXT NOT NULL,
	created_at      INTEGER NOT NULL,
	expires_at      INTEGER NOT NULL,
	revoked_at      INTEGER,
	args_scope      TEXT NOT NULL,
	args_hash       TEXT NOT NULL DEFAULT '',
	CHECK ((args_scope = 'exact' AND args_hash <> '') OR (args_scope = 'any' AND args_hash = ''))
);
INSERT INTO grants_v2 (id, user_id, tool, scope, conversation_id, tool_call_id, created_by, created_at, expires_at, revoked_at, args_scope, args_hash)
	SELECT id, user_id, tool, scope, conversation_id, tool_call_id, created_by, created_at, expires_at, revoked_at, 'any', '' FROM grants;
DROP TABLE grants;
ALTER TABLE grants_v2 RENAME TO grants;
CREATE INDEX grants_user_tool ON grants (user_id, tool, expires_at);
CREATE INDEX grants_created ON grants (created_at DESC, id);
