-- The log tables written by every append keep no foreign key to conversations (issue 18:
-- PostgreSQL CPU per approval). Each row inserted into entries, tool_calls, expiries or steps ran
-- the key's check, a SELECT … FOR KEY SHARE of its conversation through SPI, for a row the same
-- transaction had just locked and updated: an append's first statement is parley_advance, which
-- updates the conversation's row under its lock, or raises (P0002 when the conversation does not
-- exist), aborting everything after it. What the keys also did, now done by the store:
--   * ON DELETE CASCADE: DeleteConversation deletes the conversation's row first (taking its
--     lock, so an append in flight commits before it and its rows are seen and deleted, and an
--     append after it finds no conversation and writes nothing), then the rows of each of these
--     tables, in one transaction.
--   * refusing a row of a conversation that does not exist: ScheduleExpiry, the one writer of
--     these tables outside an append, inserts only beside its conversation's row, which it locks
--     (FOR KEY SHARE) so that a deletion waits for it.
-- conversation_owners keeps its key and cascade: it is written when a process claims a
-- conversation, not per append. The embedded store (sqlitestore/schema.sql) keeps its keys.
ALTER TABLE entries DROP CONSTRAINT entries_conversation_id_fkey;
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_conversation_id_fkey;
ALTER TABLE expiries DROP CONSTRAINT expiries_conversation_id_fkey;
ALTER TABLE steps DROP CONSTRAINT steps_conversation_id_fkey;
