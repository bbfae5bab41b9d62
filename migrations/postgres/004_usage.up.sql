-- The tokens the model reported for each user's conversations, per UTC day (YYYY-MM-DD): the
-- per-user daily token budget reads it before each model call.
CREATE TABLE usage (
	user_id text NOT NULL,
	day     text NOT NULL,
	tokens  bigint NOT NULL,
	PRIMARY KEY (user_id, day)
);
