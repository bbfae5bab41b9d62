-- The cluster's sealing key leaves the database: a role that could read cluster_secret (SELECT
-- alone) could seal forwarded requests as anyone. Every process now reads the key from its own
-- configuration (PARLEY_CLUSTER_KEY or PARLEY_CLUSTER_KEY_FILE; internal/cluster/key.go), and
-- the old key, readable by whoever could read this table, is forgotten: do not reuse it.
DROP TABLE IF EXISTS cluster_secret;

-- Large bodies in cluster_mail are sealed with the key too, bound to their notification; rows
-- written in clear before this migration would be refused, so they go.
DELETE FROM cluster_mail;
