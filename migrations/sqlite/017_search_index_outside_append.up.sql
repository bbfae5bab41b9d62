-- Messages are indexed for search outside the append's transaction (sqlitestore/index.go; this
-- was the embedded schema's version 8). An append moves the conversation's last_seq past its
-- indexed_seq, and the entries in between are copied into message_text, many per transaction, by
-- the next search of the owner (before it reads: search stays read-your-writes) or by the
-- background indexer shortly after the append, whichever comes first; indexed_seq moves in the
-- same transaction as the rows it covers, so nothing appended is missed after a crash. No index
-- lists the pending conversations: one would cost every append a page (a search checks its
-- owner's rows; the indexer is told of appends in memory and looks through the table on start).
-- The trigger of 009 wrote the row in the append's own statement, which cost a message's append
-- about one more commit's worth of work (FTS5 flushing a new segment at every commit;
-- docs/benchmarks.md). A deleted conversation's unindexed entries go with it. What is logged so
-- far is indexed already: every conversation starts indexed up to its log.
DROP TRIGGER entries_search_ai;
ALTER TABLE conversations ADD COLUMN indexed_seq INTEGER NOT NULL DEFAULT 0;
UPDATE conversations SET indexed_seq = last_seq;
