-- Sign-in limits shared by every process and kept across restarts (web's sign-in limits): the
-- failed tries counted against one key — an account's name, a client address or its subnet,
-- stored as the SHA-256 of the key, never the name or the address — since first_at, the latest
-- at last_at. A sign-in locks its keys' rows (FOR UPDATE, in a fixed order), decides, and
-- writes them in one transaction, so tries sent at once to several processes are all counted.
-- A row whose window ended carries nothing: sessions' hourly purge sweeps them (first_at).
CREATE TABLE signin_attempts (
	key      text PRIMARY KEY,
	first_at timestamptz NOT NULL,
	last_at  timestamptz NOT NULL,
	failures integer NOT NULL
);
CREATE INDEX signin_attempts_first ON signin_attempts (first_at);
