-- Search scoped to its owner before it matches (sqlitestore/search.go). Every term of the FTS5
-- index is now the owner's key (a hash of owner_id) followed by a word, so that a prefix query
-- ("<key>budg"*) walks that owner's terms alone: over the words themselves it walked every
-- owner's, and one owner's search grew with everyone's data (docs/benchmarks.md). The terms are
-- made in Go (parley_search_terms, which the process registers with its SQLite driver) by
-- message_text's insert trigger; the index keeps no copy of them (contentless, rows deleted by
-- rowid), and excerpts are made in Go from message_text's body. The old index is dropped and
-- every conversation marked not indexed: the background indexer rebuilds the index after the
-- upgrade, and a search first indexes its own owner's conversations (index.go), so nothing is
-- missed meanwhile. Marks are word characters in the tokenizer, as in Go's search words.
DROP TRIGGER message_text_ai;
DROP TRIGGER message_text_ad;
DROP TABLE message_search;
DELETE FROM message_text;
CREATE VIRTUAL TABLE message_search USING fts5 (terms, content = '', contentless_delete = 1,
	tokenize = 'unicode61 remove_diacritics 0 categories ''L* N* Co M*''');
CREATE TRIGGER message_text_ai AFTER INSERT ON message_text BEGIN
	INSERT INTO message_search (rowid, terms) VALUES (new.id,
		parley_search_terms((SELECT owner_id FROM conversations WHERE id = new.conversation_id), new.body));
END;
CREATE TRIGGER message_text_ad AFTER DELETE ON message_text BEGIN
	DELETE FROM message_search WHERE rowid = old.id;
END;
UPDATE conversations SET indexed_seq = 0;
