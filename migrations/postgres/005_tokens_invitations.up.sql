-- API tokens get a scope (full, or resolve: may only resolve calls) and an optional expiry;
-- admins invite people with one-time links (only the link token's SHA-256 is stored).
ALTER TABLE api_tokens ADD COLUMN scope text NOT NULL DEFAULT 'full';
ALTER TABLE api_tokens ADD COLUMN expires_at timestamptz;

CREATE TABLE invitations (
	id         text PRIMARY KEY,
	hash       bytea NOT NULL UNIQUE,
	role       text NOT NULL,
	created_by text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	used_at    timestamptz,
	used_by    text,
	revoked_at timestamptz
);
CREATE INDEX invitations_created ON invitations (created_at);
