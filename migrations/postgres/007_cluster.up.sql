-- Several processes on one database (internal/cluster). PostgreSQL is the coordinator: a
-- process is alive while it keeps its heartbeat row fresh and its listening session is
-- connected (parley_node_alive); a conversation has at most one
-- owner, the process whose actor runs it; owners route each other's requests through
-- NOTIFY, and payloads too large for a notification wait in cluster_mail.

CREATE TABLE cluster_nodes (
	id           text PRIMARY KEY,
	started_at   timestamptz NOT NULL DEFAULT now(),
	heartbeat_at timestamptz NOT NULL DEFAULT now(),
	host         text NOT NULL DEFAULT '',
	-- The backend of the process's listening connection. A killed process's connections end
	-- with it, so its backend leaves pg_stat_activity at once: the others need not wait for
	-- its heartbeat to go stale. NULL until the process listens.
	backend_pid  integer
);

-- parley_node_alive: the process beat within ttl and its listening session is still there
-- (when it has said which it is). The heartbeat alone decides for a process whose network
-- vanished without closing its sockets. pg_stat_get_activity(pid) reads one backend's entry:
-- 0.12 ms here, against 0.69 ms for the pg_stat_activity view, which every claim paid twice.
CREATE FUNCTION parley_node_alive(node text, ttl interval) RETURNS boolean
LANGUAGE sql STABLE AS $$
	SELECT EXISTS (
		SELECT 1 FROM cluster_nodes n
		WHERE n.id = node AND n.heartbeat_at > now() - ttl
		AND (n.backend_pid IS NULL OR EXISTS (SELECT 1 FROM pg_stat_get_activity(n.backend_pid))))
$$;

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
-- known cluster-wide. version orders a process's writes for one conversation (a late write of
-- an older count loses). Rows of a dead process are ignored (it is not alive) and removed with
-- it.
CREATE TABLE client_presence (
	node_id         text NOT NULL REFERENCES cluster_nodes (id) ON DELETE CASCADE,
	conversation_id text NOT NULL,
	sockets         integer NOT NULL CHECK (sockets >= 0),
	version         bigint NOT NULL,
	PRIMARY KEY (conversation_id, node_id)
);

-- The key that seals every notification (AES-256-GCM): LISTEN and NOTIFY need no privilege
-- beyond CONNECT, so a role that may connect but not read this table can neither read the
-- events nor forge a request. Made by the first process that starts.
CREATE TABLE cluster_secret (
	id  integer PRIMARY KEY CHECK (id = 1),
	key bytea NOT NULL CHECK (length(key) = 32)
);

-- Messages between processes too large for NOTIFY's payload: the notification carries the id;
-- the receiver reads and deletes the row. Rows nobody read (the receiver died) are swept.
CREATE TABLE cluster_mail (
	id         bigserial PRIMARY KEY,
	body       bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);

-- parley_claim makes node the conversation's owner unless a live process owns it, and returns
-- the owner; '' when node itself is not alive (it must re-join before it owns anything), NULL
-- when the row kept moving under it. Its statements each see what is committed when they run,
-- so a claimer that lost a race reads the winner, not the dead owner both saw.
CREATE FUNCTION parley_claim(conv text, node text, ttl interval) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	owner text;
BEGIN
	IF NOT parley_node_alive(node, ttl) THEN
		RETURN '';
	END IF;
	FOR i IN 1..3 LOOP
		INSERT INTO conversation_owners AS o (conversation_id, node_id) VALUES (conv, node)
		ON CONFLICT (conversation_id) DO UPDATE SET node_id = EXCLUDED.node_id, claimed_at = now()
		WHERE o.node_id <> EXCLUDED.node_id AND NOT parley_node_alive(o.node_id, ttl)
		RETURNING node_id INTO owner;
		IF owner IS NULL THEN
			SELECT node_id INTO owner FROM conversation_owners WHERE conversation_id = conv;
		END IF;
		IF owner IS NOT NULL THEN
			RETURN owner;
		END IF;
	END LOOP;
	RETURN NULL;
END $$;
