-- The outbox is keyed by (conversation_id, tool_call_id), not tool_call_id alone (models reuse
-- ids across conversations). SQLite cannot drop a column's UNIQUE: the table is rebuilt.
CREATE TABLE outbox_v2 (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	conversation_id TEXT NOT NULL,
	tool_call_id    TEXT NOT NULL,
	to_addr         TEXT NOT NULL,
	subject         TEXT NOT NULL,
	body            TEXT NOT NULL,
	created_at      INTEGER NOT NULL,
	UNIQUE (conversation_id, tool_call_id)
);
INSERT INTO outbox_v2 (id, conversation_id, tool_call_id, to_addr, subject, body, created_at)
	SELECT id, conversation_id, tool_call_id, to_addr, subject, body, created_at FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_v2 RENAME TO outbox;
CREATE INDEX outbox_conversation ON outbox (conversation_id, id);
