-- A tool_call_id is unique only within its conversation: models number their calls (call_0,
-- call_1 …) in every conversation, so the outbox is keyed by the pair. Existing rows satisfy
-- the new key (they were unique by tool_call_id alone).
ALTER TABLE outbox DROP CONSTRAINT outbox_tool_call_id_key;
ALTER TABLE outbox ADD CONSTRAINT outbox_call_key UNIQUE (conversation_id, tool_call_id);
