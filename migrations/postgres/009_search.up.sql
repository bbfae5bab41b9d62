-- Search over conversations' messages (store.FindConversations): a tsvector of each user and
-- assistant message, kept by PostgreSQL itself in the statement that appends the entry (so in
-- the append's transaction) and gone with the entry (a deleted conversation cascades). The
-- 'simple' configuration lowercases words without stemming or stop words, like the embedded
-- store's FTS5 index (sqlitestore/schema.sql), so both find the same messages. Only a message's
-- first 100 000 characters are indexed (store.MaxIndexedText): a tsvector has a 1 MB limit, and
-- an append must never fail because a model wrote a long answer. The excerpt markers
-- (store.SnippetMark, store.SnippetEnd) are removed from the indexed text, and the punctuation
-- from which PostgreSQL's parser makes compound tokens (tags, e-mail addresses, URLs, paths,
-- hyphenated words, numbers with dots) becomes spaces: every store then splits text into words
-- at every non-letter, non-digit character, as store.SearchWords splits a search.
-- parley_message_text is a message entry's text. The log keeps any JSON (json, not jsonb), and
-- ->> refuses to extract text with a \u0000 escape or a lone surrogate (22P05): such a message
-- (the agent never writes one) is not indexed rather than its append failing.
CREATE FUNCTION parley_message_text(d json) RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
	RETURN coalesce(d ->> 'text', '');
EXCEPTION WHEN untranslatable_character OR invalid_text_representation OR invalid_parameter_value THEN
	RETURN '';
END $$;
CREATE FUNCTION parley_search_text(t text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
	RETURN left(translate(translate(t, E'\x02\x03', ''), '<>/\&=@.:_-+#%~?|^$', '                   '), 100000);
ALTER TABLE entries ADD COLUMN search tsvector GENERATED ALWAYS AS (
	CASE WHEN type IN ('user_message', 'assistant_message')
		THEN to_tsvector('simple'::regconfig, parley_search_text(parley_message_text(data)))
	END) STORED;
CREATE INDEX entries_search ON entries USING gin (search);
