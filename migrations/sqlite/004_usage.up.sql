-- The tokens each user's model calls used, per UTC day (YYYY-MM-DD): the daily token budget.
CREATE TABLE IF NOT EXISTS usage (
	user_id TEXT NOT NULL,
	day     TEXT NOT NULL,
	tokens  INTEGER NOT NULL,
	PRIMARY KEY (user_id, day)
);
