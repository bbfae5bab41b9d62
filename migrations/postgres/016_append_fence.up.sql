-- Fencing the appends (issue 14: a takeover while the dead owner's write is still in flight).
-- A process that is killed (or loses its listening session) counts as dead at once, and another
-- may claim its conversations and load their logs while an append it sent before dying is still
-- running in the database (waiting on a lock, say); PostgreSQL commits that append after the
-- client is gone, under the new owner's feet: its state is stale, the message or decision is
-- applied twice, the turn stalls. The optimistic sequence check catches that only if the new
-- owner writes after it.
--
-- conversations.owner_node is the last process that claimed the conversation, written by
-- parley_claim in the same statement as the claim, under the conversation's row lock; an append
-- moves the log only when it names that process (or none was recorded: a claim by a binary from
-- before this migration). Both take the row's lock, so they are ordered: an append in flight
-- commits before the claim (which waits for it; the new owner then loads what it wrote), or it
-- comes after and is refused with PY410 (pgstore: store.ErrNotOwner). The column is written only
-- when ownership changes, never per append.
--
-- parley_append(owner, …) is the fenced twin of 015's, which stays for a binary from before this
-- migration that is still running; an empty owner (a store not run by a cluster node) is not
-- checked.
SET LOCAL lock_timeout = '5s';
ALTER TABLE conversations ADD COLUMN owner_node text;

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
	-- The conversation's row before the owner's, in the order an append and a deletion take
	-- them; it waits for an append in flight to commit.
	PERFORM 1 FROM conversations WHERE id = conv FOR NO KEY UPDATE;
	FOR i IN 1..3 LOOP
		INSERT INTO conversation_owners AS o (conversation_id, node_id) VALUES (conv, node)
		ON CONFLICT (conversation_id) DO UPDATE SET node_id = EXCLUDED.node_id, claimed_at = now()
		WHERE o.node_id <> EXCLUDED.node_id AND NOT parley_node_alive(o.node_id, ttl)
		RETURNING node_id INTO owner;
		IF owner = node THEN
			-- Taken: the fence moves with it.
			UPDATE conversations SET owner_node = node WHERE id = conv AND owner_node IS DISTINCT FROM node;
			RETURN owner;
		END IF;
		IF owner IS NULL THEN
			SELECT node_id INTO owner FROM conversation_owners WHERE conversation_id = conv;
		END IF;
		IF owner IS NOT NULL THEN
			RETURN owner;
		END IF;
	END LOOP;
	RETURN NULL;
END $$;

CREATE FUNCTION parley_append(owner text, convs text[], after_seqs bigint[], new_lasts bigint[], ats timestamptz[], new_statuses text[],
	e_convs text[], e_seqs bigint[], e_types text[], e_calls text[], e_actors text[], e_data json[], e_ats timestamptz[],
	c_convs text[], c_calls text[], c_names text[], c_executors text[], c_approvals text[], c_approvers text[], c_statuses text[],
	c_kinds text[], c_args json[], c_results json[], c_prompts json[], c_expires timestamptz[], c_seqs bigint[], c_created timestamptz[],
	c_updated timestamptz[],
	x_convs text[], x_calls text[],
	s_convs text[], s_calls text[], s_ats timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	cur bigint;
	holder text;
BEGIN
	FOR i IN 1 .. coalesce(cardinality(convs), 0) LOOP
		UPDATE conversations SET last_seq = new_lasts[i], updated_at = ats[i], status = COALESCE(NULLIF(new_statuses[i], ''), status)
		WHERE id = convs[i] AND last_seq = after_seqs[i] AND (owner = '' OR owner_node IS NULL OR owner_node = owner);
		IF NOT FOUND THEN
			SELECT last_seq, owner_node INTO cur, holder FROM conversations WHERE id = convs[i];
			IF NOT FOUND THEN
				RAISE EXCEPTION 'conversation % does not exist', convs[i] USING ERRCODE = 'P0002';
			END IF;
			IF owner <> '' AND holder IS NOT NULL AND holder <> owner THEN
				RAISE EXCEPTION 'conversation % is owned by process %, not %', convs[i], holder, owner USING ERRCODE = 'PY410';
			END IF;
			RAISE EXCEPTION 'log is at %, not %', cur, after_seqs[i] USING ERRCODE = 'PY409';
		END IF;
	END LOOP;
	IF cardinality(e_convs) > 0 THEN
		INSERT INTO entries (conversation_id, seq, type, tool_call_id, actor, data, created_at)
		SELECT * FROM unnest(e_convs, e_seqs, e_types, e_calls, e_actors, e_data, e_ats);
	END IF;
	IF cardinality(c_convs) > 0 THEN
		INSERT INTO tool_calls (conversation_id, tool_call_id, name, executor, approval, approvers, status, pending_kind, args, result,
			prompt, expires_at, seq, created_at, updated_at)
		SELECT * FROM unnest(c_convs, c_calls, c_names, c_executors, c_approvals, c_approvers, c_statuses, c_kinds, c_args, c_results,
			c_prompts, c_expires, c_seqs, c_created, c_updated)
		ON CONFLICT (conversation_id, tool_call_id) DO UPDATE SET name = excluded.name, executor = excluded.executor,
			approval = excluded.approval, approvers = excluded.approvers, status = excluded.status, pending_kind = excluded.pending_kind,
			args = excluded.args, result = excluded.result, prompt = excluded.prompt, expires_at = excluded.expires_at,
			seq = CASE WHEN excluded.seq = 0 THEN tool_calls.seq ELSE excluded.seq END, updated_at = excluded.updated_at;
	END IF;
	FOR i IN 1 .. coalesce(cardinality(x_convs), 0) LOOP
		DELETE FROM expiries WHERE conversation_id = x_convs[i] AND tool_call_id = x_calls[i];
	END LOOP;
	IF cardinality(s_convs) > 0 THEN
		INSERT INTO expiries (conversation_id, tool_call_id, at)
		SELECT * FROM unnest(s_convs, s_calls, s_ats)
		ON CONFLICT (conversation_id, tool_call_id) DO UPDATE SET at = excluded.at, claimed_until = NULL;
	END IF;
END
$$;
