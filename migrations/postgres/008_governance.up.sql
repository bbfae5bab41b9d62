-- Approval governance: audit records carry their particulars and form a hash chain; grants
-- remember approvals.

-- detail: the action's particulars as JSON text, stored as written (it is hashed). chain_seq,
-- prev_hash and hash place a record in the chain: parley_chain_audit sets them in the
-- transaction that writes the record, serialized across processes by an advisory lock.
ALTER TABLE audit ADD COLUMN detail text NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN chain_seq bigint UNIQUE;
ALTER TABLE audit ADD COLUMN prev_hash text NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN hash text NOT NULL DEFAULT '';
CREATE INDEX audit_unchained ON audit (id) WHERE chain_seq IS NULL;
CREATE INDEX audit_action ON audit (action, chain_seq DESC);

-- One field of a record as it enters its hash: its length in bytes, a colon, the text, a
-- newline (store.AuditHash writes the same in Go).
CREATE FUNCTION parley_audit_field(v text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
	SELECT octet_length(v)::text || ':' || v || E'\n'
$$;

-- parley_chain_audit chains the records this transaction wrote (and any older unchained ones,
-- written before this migration), in id order, after the chain's head. The transaction-level
-- advisory lock makes concurrent writers chain one after the other: a writer waits here until
-- the one before it commits, then reads its head (READ COMMITTED: each statement of a volatile
-- function sees what is committed when it runs). Called last in the transaction, so the lock is
-- held for as short a time as possible.
CREATE FUNCTION parley_chain_audit() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	head_seq  bigint;
	head_hash text;
	new_hash  text;
	r         record;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM audit WHERE chain_seq IS NULL) THEN
		RETURN;
	END IF;
	PERFORM pg_advisory_xact_lock(7283650918263001);
	SELECT chain_seq, hash INTO head_seq, head_hash FROM audit WHERE chain_seq IS NOT NULL ORDER BY chain_seq DESC LIMIT 1;
	IF head_seq IS NULL THEN
		head_seq := 0;
		head_hash := '';
	END IF;
	FOR r IN SELECT id, conversation_id, tool_call_id, tool, actor_id, action, reason, args_hash, detail, at
	         FROM audit WHERE chain_seq IS NULL ORDER BY id LOOP
		head_seq := head_seq + 1;
		new_hash := encode(sha256(convert_to(
			parley_audit_field(head_hash) || parley_audit_field(head_seq::text) ||
			parley_audit_field(r.conversation_id) || parley_audit_field(r.tool_call_id) ||
			parley_audit_field(r.tool) || parley_audit_field(r.actor_id) || parley_audit_field(r.action) ||
			parley_audit_field(r.reason) || parley_audit_field(r.args_hash) || parley_audit_field(r.detail) ||
			parley_audit_field(to_char(r.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')), 'UTF8')), 'hex');
		UPDATE audit SET chain_seq = head_seq, prev_hash = head_hash, hash = new_hash WHERE id = r.id;
		head_hash := new_hash;
	END LOOP;
END
$$;

-- Remembered approvals. A grant covers later calls of tool by user_id's conversations (scope
-- user) or by conversation_id alone (scope conversation) until expires_at or revoked_at.
CREATE TABLE grants (
	id              text PRIMARY KEY,
	user_id         text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	tool            text NOT NULL,
	scope           text NOT NULL,
	conversation_id text NOT NULL,
	tool_call_id    text NOT NULL,
	created_by      text NOT NULL,
	created_at      timestamptz NOT NULL,
	expires_at      timestamptz NOT NULL,
	revoked_at      timestamptz
);
CREATE INDEX grants_user_tool ON grants (user_id, tool, expires_at DESC);
