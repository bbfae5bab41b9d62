-- Grants are scoped to the arguments they were given for (issue: grants never rise above a
-- rule). args_scope is 'exact' (the call's canonical arguments hash to args_hash, agent
-- canonicalHash) or 'any' (every call of the tool in the grant's scope, offered only for a tool
-- without rules). Grants made before this migration covered any arguments, so they stay 'any':
-- the grants pages say so, and their owners (or an admin) can revoke them. This binary always
-- names the scope (an empty one is refused by the check); the default is for a binary from before
-- this migration still running during a rolling upgrade, whose grants do cover any arguments. An
-- 'exact' grant without a hash could match nothing and is refused.
SET LOCAL lock_timeout = '5s'; -- behind the appends' grant inserts; the migrator tries again
ALTER TABLE grants ADD COLUMN args_scope text NOT NULL DEFAULT 'any';
ALTER TABLE grants ADD COLUMN args_hash text NOT NULL DEFAULT '';
ALTER TABLE grants ADD CONSTRAINT grants_args_scope CHECK (
	(args_scope = 'exact' AND args_hash <> '') OR (args_scope = 'any' AND args_hash = ''));

-- Admins list every person's active grants, newest first.
CREATE INDEX grants_created ON grants (created_at DESC, id);
