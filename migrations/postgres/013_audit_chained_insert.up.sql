-- The approve path's audit record and its tool_calls row, written with fewer rows and index
-- entries (issue 18: PostgreSQL CPU per approval).

-- parley_audit_append writes audit records already placed in the hash chain: under the chain's
-- lock it reads the head once and inserts each record with its chain_seq, prev_hash and hash,
-- the same hash parley_chain_audit computes (migration 008) and store.AuditHash verifies. Before,
-- each record was inserted unchained and then updated by parley_chain_audit: a second version
-- of the row, with an entry in each of audit's indexes (chain_seq changes, so never a HOT
-- update), and a scan for the unchained. The arrays are the records' columns, one element per
-- record, chained in array order. Every other writer of audit records chains them in its own
-- transaction under the same lock (parley_chain_audit, still used by AppendAudit and by a binary
-- from before this migration that is still running), so none is left unchained for this one to
-- chain: the records left unchained from before migration 008 are chained below, once.
CREATE FUNCTION parley_audit_append(convs text[], call_ids text[], tools text[], actor_ids text[], actions text[],
	reasons text[], args_hashes text[], ats timestamptz[], details text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	head_seq  bigint;
	head_hash text;
	new_hash  text;
BEGIN
	PERFORM pg_advisory_xact_lock(7283650918263001);
	SELECT chain_seq, hash INTO head_seq, head_hash FROM audit WHERE chain_seq IS NOT NULL ORDER BY chain_seq DESC LIMIT 1;
	IF head_seq IS NULL THEN
		head_seq := 0;
		head_hash := '';
	END IF;
	FOR i IN 1 .. coalesce(array_length(convs, 1), 0) LOOP
		head_seq := head_seq + 1;
		new_hash := encode(sha256(convert_to(
			parley_audit_field(head_hash) || parley_audit_field(head_seq::text) ||
			parley_audit_field(convs[i]) || parley_audit_field(call_ids[i]) ||
			parley_audit_field(tools[i]) || parley_audit_field(actor_ids[i]) || parley_audit_field(actions[i]) ||
			parley_audit_field(reasons[i]) || parley_audit_field(args_hashes[i]) || parley_audit_field(details[i]) ||
			parley_audit_field(to_char(ats[i] AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')), 'UTF8')), 'hex');
		INSERT INTO audit (conversation_id, tool_call_id, tool, actor_id, action, reason, args_hash, at, detail, chain_seq, prev_hash, hash)
		VALUES (convs[i], call_ids[i], tools[i], actor_ids[i], actions[i], reasons[i], args_hashes[i], ats[i], details[i], head_seq, head_hash, new_hash);
		head_hash := new_hash;
	END LOOP;
END
$$;

SELECT parley_chain_audit();

-- ListPending reads awaiting calls only (status = 'awaiting', written as a literal so the planner
-- can use this index), while every change of a call's status wrote an entry here: a decided
-- call's two later versions (running, resolved) no longer do.
DROP INDEX tool_calls_pending;
CREATE INDEX tool_calls_pending ON tool_calls (pending_kind, created_at DESC) WHERE status = 'awaiting';
