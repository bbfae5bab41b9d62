-- The audit trail becomes tamper-evident against whoever can write the database (issue: audit
-- tamper evidence). Until now a record's hash was an unkeyed SHA-256 that the database itself
-- computed (parley_chain_audit, parley_audit_append): anyone able to write the table could
-- change a record and compute the chain again after it — with those very functions — or delete
-- the newest records, and `web audit verify` still said intact.
--
-- From here each record is linked in Go with an HMAC-SHA256 under a key kept outside the
-- database (store.AuditKey; PARLEY_AUDIT_KEY or PARLEY_AUDIT_KEY_FILE), in the transaction that
-- inserts it, after the chain's head read under the advisory lock every writer has taken since
-- migration 008. key_id names the key (never the key itself); the records written before this
-- migration keep their SHA-256 hashes and an empty key_id, and are accepted only as the chain's
-- prefix. The chain's head is signed and written outside the database after each commit (the
-- anchor file, the webhook), so a tail cut off is seen too.
--
-- A binary from before this migration that is still running can no longer write an audit
-- record (its functions are gone): the record it would write is one the keyed chain refuses.
SET LOCAL lock_timeout = '5s';
LOCK TABLE audit IN ACCESS EXCLUSIVE MODE;

DROP FUNCTION parley_chain_audit();
DROP FUNCTION parley_audit_append(text[], text[], text[], text[], text[], text[], text[], timestamptz[], text[]);
DROP FUNCTION parley_audit_field(text);

ALTER TABLE audit ADD COLUMN key_id text NOT NULL DEFAULT '';
-- Every record is chained in the transaction that writes it (migration 013 chained the last of
-- those written unchained).
DROP INDEX audit_unchained;
ALTER TABLE audit ALTER COLUMN chain_seq SET NOT NULL;
-- The unkeyed prefix's end, read once per process for the heads it anchors (a few rows at most
-- ever match: none is written after this migration).
CREATE INDEX audit_unkeyed ON audit (chain_seq) WHERE key_id = '';

-- Append-only: the database refuses to change or remove a record, whoever asks (TRUNCATE too,
-- which row triggers do not see). Deleting a conversation leaves its records (they have no key to
-- it). A role that owns the table can still drop these triggers: they stop mistakes and the
-- application's own SQL; the key and the anchor are what show a determined rewrite.
CREATE FUNCTION parley_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'the audit trail is append-only: % on audit refused', TG_OP USING ERRCODE = 'PY405';
END
$$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit
	FOR EACH ROW EXECUTE FUNCTION parley_audit_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
	FOR EACH STATEMENT EXECUTE FUNCTION parley_audit_append_only();
