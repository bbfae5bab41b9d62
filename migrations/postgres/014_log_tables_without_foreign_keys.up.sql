-- The log tables written by every append keep no foreign key to conversations (issue 18:
-- PostgreSQL CPU per approval). Each row inserted into entries, tool_calls, expiries or steps ran
-- its key's check, a SELECT … FOR KEY SHARE of its conversation through SPI, for a row the same
-- transaction had just locked and updated: an append's first statement moves the conversation's
-- log under its row lock, or raises (P0002 when the conversation does not exist), aborting
-- everything after it. What the keys also did is done otherwise:
--   * ON DELETE CASCADE: parley_conversation_deleted, after each deleted conversation row, deletes
--     its rows of these tables in the same statement — whoever deletes it: the store, a binary
--     from before this migration still running, or an operator by hand. The row's lock comes
--     first: an append in flight holds it from its sequence check to its commit, so it commits
--     before and its rows are seen here (each statement of a volatile function reads what is
--     committed when it starts), and an append that comes after finds no conversation and
--     writes nothing.
--   * refusing a row of a conversation that does not exist: ScheduleExpiry, the one writer of
--     these tables outside an append, inserts only beside its conversation's row, which it locks
--     (FOR KEY SHARE) so that a deletion waits for it.
-- conversation_owners keeps its key and cascade: it is written when a process claims a
-- conversation, not per append. The embedded store (sqlitestore/schema.sql) keeps its keys.
--
-- Dropping a key locks its table and conversations (ACCESS EXCLUSIVE), table by table; an append
-- of a binary still running from before this migration locks conversations first, then entries.
-- The tables are locked here at once, conversations first (the appends' order), so the two cannot
-- deadlock; waiting longer than lock_timeout fails the migration (55P03), which is retried
-- (applyMigrations) rather than left holding every append behind it.
SET LOCAL lock_timeout = '5s';
LOCK TABLE conversations, entries, tool_calls, expiries, steps IN ACCESS EXCLUSIVE MODE;
ALTER TABLE entries DROP CONSTRAINT entries_conversation_id_fkey;
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_conversation_id_fkey;
ALTER TABLE expiries DROP CONSTRAINT expiries_conversation_id_fkey;
ALTER TABLE steps DROP CONSTRAINT steps_conversation_id_fkey;

-- Row by row, so that each delete reads the tables by their keys' first column whatever the
-- planner knows of them (a statement trigger's transition table has no statistics).
CREATE FUNCTION parley_conversation_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM entries WHERE conversation_id = OLD.id;
	DELETE FROM tool_calls WHERE conversation_id = OLD.id;
	DELETE FROM expiries WHERE conversation_id = OLD.id;
	DELETE FROM steps WHERE conversation_id = OLD.id;
	RETURN NULL;
END
$$;
CREATE TRIGGER conversation_deleted AFTER DELETE ON conversations
	FOR EACH ROW EXECUTE FUNCTION parley_conversation_deleted();
