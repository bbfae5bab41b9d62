-- parley_advance_all is parley_advance for a group of appends to different conversations that
-- commit together (pgstore's group commit): it moves each log from its after_seq to its
-- new_last, stamping and, when the status is not empty, setting it, or raises PY409 when any
-- log is elsewhere, which aborts the whole group (each append is then run again on its own, so
-- only the one at fault gets the conflict).
CREATE FUNCTION parley_advance_all(convs text[], after_seqs bigint[], new_lasts bigint[], ats timestamptz[], new_statuses text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	moved bigint;
BEGIN
	UPDATE conversations c
	SET last_seq = v.new_last, updated_at = v.at, status = COALESCE(NULLIF(v.new_status, ''), c.status)
	FROM unnest(convs, after_seqs, new_lasts, ats, new_statuses) AS v(id, after_seq, new_last, at, new_status)
	WHERE c.id = v.id AND c.last_seq = v.after_seq;
	GET DIAGNOSTICS moved = ROW_COUNT;
	IF moved <> cardinality(convs) THEN
		RAISE EXCEPTION '% of % logs are not where their appends expect', cardinality(convs) - moved, cardinality(convs)
			USING ERRCODE = 'PY409';
	END IF;
END
$$;
