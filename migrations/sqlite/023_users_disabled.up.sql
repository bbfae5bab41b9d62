-- An admin may disable an account (postgres/023 says what it stops).
ALTER TABLE users ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0;
