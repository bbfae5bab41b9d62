-- Several processes on one database (internal/cluster). PostgreSQL is the coordinator: a
-- process is alive while it keeps its heartbeat row fresh; a conversation has at most one
-- owner, the process whose actor runs it; owners route each other's requests through
-- NOTIFY, and payloads too large for a notification wait in cluster_mail.

CREATE TABLE cluster_nodes (
	id           text PRIMARY KEY,
	started_at   timestamptz NOT NULL DEFAULT now(),
	heartbeat_at timestamptz NOT NULL DEFAULT now(),
	host         text NOT NULL DEFAULT ''
);

-- One row per owned conversation: the process that runs its actor (and revives it after it
-- hibernated). A conversation whose owner's heartbeat is stale, or that has no row, may be
-- claimed by any live process. A process that leaves deletes its node row, and so its rows.
CREATE TABLE conversation_owners (
	conversation_id text PRIMARY KEY REFERENCES conversations (id) ON DELETE CASCADE,
	node_id         text NOT NULL REFERENCES cluster_nodes (id) ON DELETE CASCADE,
	claimed_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX conversation_owners_node ON conversation_owners (node_id);

-- Live page sockets per process and conversation: whether a browser can run a client call is
-- known cluster-wide. Rows of a dead process are ignored (its heartbeat is stale) and removed
-- with it.
CREATE TABLE client_presence (
	node_id         text NOT NULL REFERENCES cluster_nodes (id) ON DELETE CASCADE,
	conversation_id text NOT NULL,
	sockets         integer NOT NULL CHECK (sockets > 0),
	PRIMARY KEY (conversation_id, node_id)
);

-- Messages between processes too large for NOTIFY's payload: the notification carries the id;
-- the receiver reads and deletes the row. Rows nobody read (the receiver died) are swept.
CREATE TABLE cluster_mail (
	id         bigserial PRIMARY KEY,
	body       bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);

-- parley_claim makes node the conversation's owner unless a live process owns it, and returns
-- the owner. Its two statements each see what is committed when they run, so a claimer that
-- lost a race reads the winner, not the dead owner both saw.
CREATE FUNCTION parley_claim(conv text, node text, ttl interval) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	owner text;
BEGIN
	INSERT INTO conversation_owners AS o (conversation_id, node_id) VALUES (conv, node)
	ON CONFLICT (conversation_id) DO UPDATE SET node_id = EXCLUDED.node_id, claimed_at = now()
	WHERE o.node_id <> EXCLUDED.node_id AND NOT EXISTS (
		SELECT 1 FROM cluster_nodes n WHERE n.id = o.node_id AND n.heartbeat_at > now() - ttl)
	RETURNING node_id INTO owner;
	IF owner IS NULL THEN
		SELECT node_id INTO owner FROM conversation_owners WHERE conversation_id = conv;
	END IF;
	RETURN owner;
END $$;
