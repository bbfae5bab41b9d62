-- Search over messages (store.FindConversations; PostgreSQL's twin is postgres/009): the text of
-- each user and assistant message (its first 100 000 characters, the excerpt markers removed) and
-- an FTS5 index over it kept by triggers (external content), with the messages already logged.
-- Deleting a conversation cascades to message_text, whose trigger takes the rows out of the
-- index. unicode61 without diacritics removal folds case and nothing else, as PostgreSQL's
-- 'simple'. Here a trigger on entries writes a message's text in the append's own statement;
-- 017 moves that out of the append.
CREATE TABLE message_text (
	id              INTEGER PRIMARY KEY,
	conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	seq             INTEGER NOT NULL,
	body            TEXT NOT NULL,
	UNIQUE (conversation_id, seq)
);
CREATE VIRTUAL TABLE message_search USING fts5 (body, content = 'message_text', content_rowid = 'id',
	tokenize = 'unicode61 remove_diacritics 0');
CREATE TRIGGER message_text_ai AFTER INSERT ON message_text BEGIN
	INSERT INTO message_search (rowid, body) VALUES (new.id, new.body);
END;
CREATE TRIGGER message_text_ad AFTER DELETE ON message_text BEGIN
	INSERT INTO message_search (message_search, rowid, body) VALUES ('delete', old.id, old.body);
END;
CREATE TRIGGER entries_search_ai AFTER INSERT ON entries WHEN new.type IN ('user_message', 'assistant_message') BEGIN
	INSERT INTO message_text (conversation_id, seq, body) VALUES (new.conversation_id, new.seq,
		substr(replace(replace(coalesce(json_extract(CAST(new.data AS TEXT), '$.text'), ''), char(2), ''), char(3), ''), 1, 100000));
END;
CREATE TRIGGER entries_search_ad AFTER DELETE ON entries WHEN old.type IN ('user_message', 'assistant_message') BEGIN
	DELETE FROM message_text WHERE conversation_id = old.conversation_id AND seq = old.seq;
END;
INSERT INTO message_text (conversation_id, seq, body)
	SELECT conversation_id, seq, substr(replace(replace(coalesce(json_extract(CAST(data AS TEXT), '$.text'), ''), char(2), ''), char(3), ''), 1, 100000)
	FROM entries WHERE type IN ('user_message', 'assistant_message');
