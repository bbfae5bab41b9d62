-- parley_claim reads before it writes. A request that lands on a process that does not own the
-- conversation claims it to learn the owner; while that owner is alive (the common case) the
-- claim is now a read: no row lock, no transaction id, no commit record to flush. Only a
-- conversation without a live owner (or owned by the claimer already) goes on to the
-- INSERT … ON CONFLICT of 007, which decides races as before. An owner found alive here may die
-- before the caller reaches it; the caller's forward then finds it gone and claims again, as it
-- does with an owner hint.
CREATE OR REPLACE FUNCTION parley_claim(conv text, node text, ttl interval) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	owner text;
BEGIN
	IF NOT parley_node_alive(node, ttl) THEN
		RETURN '';
	END IF;
	SELECT o.node_id INTO owner FROM conversation_owners o
	WHERE o.conversation_id = conv AND (o.node_id = node OR parley_node_alive(o.node_id, ttl));
	IF owner IS NOT NULL THEN
		RETURN owner;
	END IF;
	FOR i IN 1..3 LOOP
		INSERT INTO conversation_owners AS o (conversation_id, node_id) VALUES (conv, node)
		ON CONFLICT (conversation_id) DO UPDATE SET node_id = EXCLUDED.node_id, claimed_at = now()
		WHERE o.node_id <> EXCLUDED.node_id AND NOT parley_node_alive(o.node_id, ttl)
		RETURNING node_id INTO owner;
		IF owner IS NULL THEN
			SELECT node_id INTO owner FROM conversation_owners WHERE conversation_id = conv;
		END IF;
		IF owner IS NOT NULL THEN
			RETURN owner;
		END IF;
	END LOOP;
	RETURN NULL;
END $$;
