-- Sign-in limits kept across restarts (postgres/021 says what each column is). The embedded
-- store serves one process; its single writer serializes the sign-ins' transactions.
CREATE TABLE signin_attempts (
	key      TEXT PRIMARY KEY,
	first_at INTEGER NOT NULL,
	last_at  INTEGER NOT NULL,
	failures INTEGER NOT NULL
);
CREATE INDEX signin_attempts_first ON signin_attempts (first_at);
