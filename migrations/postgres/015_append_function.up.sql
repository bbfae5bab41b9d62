-- parley_append: an append's sequence check and its common writes in one statement (issue 18:
-- PostgreSQL CPU per approval). pgstore sent them as up to five statements per round trip
-- (parley_advance or parley_advance_all, then one INSERT or DELETE per table), each with its own
-- bind and executor start; those over unnest were planned anew at every bind, since the custom
-- plan (which sees the arrays' lengths) always looked cheaper than the generic one — which, for
-- the merged DELETE, is a hash join over the whole of expiries. Here every statement is planned
-- once per connection and reads one row by its key, or inserts the arrays' rows.
--
-- The arguments are columns, one element per row: the appends (one per conversation, in the
-- order their rows are to be locked), then the rows of entries, tool_calls, the expiries to
-- cancel and those to schedule, in pgstore's column order (sqlcore.Writes). Each log moves from
-- its after_seq to its new_last, stamped and, when the status is not empty, given it; a log that
-- is elsewhere raises PY409 and a conversation that does not exist P0002 (as parley_advance),
-- which aborts the transaction. Removals apply before the expiries scheduled, as in an append.
-- Steps, grants, notifications and audit records stay statements of their own after it.
-- parley_advance and parley_advance_all (migrations 001, 002) stay for a binary from before this
-- migration that is still running.
CREATE FUNCTION parley_append(convs text[], after_seqs bigint[], new_lasts bigint[], ats timestamptz[], new_statuses text[],
	e_convs text[], e_seqs bigint[], e_types text[], e_calls text[], e_actors text[], e_data json[], e_ats timestamptz[],
	c_convs text[], c_calls text[], c_names text[], c_executors text[], c_approvals text[], c_approvers text[], c_statuses text[],
	c_kinds text[], c_args json[], c_results json[], c_prompts json[], c_expires timestamptz[], c_seqs bigint[], c_created timestamptz[],
	c_updated timestamptz[],
	x_convs text[], x_calls text[],
	s_convs text[], s_calls text[], s_ats timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	cur bigint;
BEGIN
	FOR i IN 1 .. coalesce(cardinality(convs), 0) LOOP
		UPDATE conversations SET last_seq = new_lasts[i], updated_at = ats[i], status = COALESCE(NULLIF(new_statuses[i], ''), status)
		WHERE id = convs[i] AND last_seq = after_seqs[i];
		IF NOT FOUND THEN
			SELECT last_seq INTO cur FROM conversations WHERE id = convs[i];
			IF NOT FOUND THEN
				RAISE EXCEPTION 'conversation % does not exist', convs[i] USING ERRCODE = 'P0002';
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
