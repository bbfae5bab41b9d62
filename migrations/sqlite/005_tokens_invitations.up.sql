-- API tokens get a scope (full, or resolve) and an optional expiry; admins' one-time invitations.
ALTER TABLE api_tokens ADD COLUMN scope TEXT NOT NULL DEFAULT 'full';
ALTER TABLE api_tokens ADD COLUMN expires_at INTEGER;
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
