-- The audit chain is keyed (store/auditkey.go; PostgreSQL's twin is the file of the same number):
-- key_id names the key a record was linked with, empty for the unkeyed records written before;
-- the file refuses to change or remove a record (a conversation's deletion leaves its records).
-- Records left unchained are chained first, unkeyed, by the store (sqlitestore's chainUnkeyed).
DROP INDEX audit_unchained;
ALTER TABLE audit ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
CREATE INDEX audit_unkeyed ON audit (chain_seq) WHERE key_id = '';
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN
	SELECT RAISE(ABORT, 'the audit trail is append-only: UPDATE on audit refused');
END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit BEGIN
	SELECT RAISE(ABORT, 'the audit trail is append-only: DELETE on audit refused');
END;
