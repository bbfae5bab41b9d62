-- An admin may disable an account: a disabled user cannot sign in, and their sessions, API
-- tokens and live connections stop working (web's authenticate and re-checks read this flag).
-- Enabling the account again restores its tokens; its sessions were ended when it was disabled.
ALTER TABLE users ADD COLUMN disabled boolean NOT NULL DEFAULT false;
