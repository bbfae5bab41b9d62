package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"parley/internal/fault"
	"parley/internal/store"
)

// Claim implements agent.Cluster. While the node is fenced, or when the database says it is
// not alive, it claims nothing (service_unavailable) and re-joins first.
func (n *Node) Claim(ctx context.Context, convID string) (string, error) {
	if n.fenced.Load() {
		return "", errRejoining
	}
	n.stats.claims.Add(1)
	var owner *string
	err := n.pool.QueryRow(ctx, `SELECT parley_claim($1, $2, $3::interval)`, convID, n.id, n.interval()).Scan(&owner)
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "23503" && pe.ConstraintName == "conversation_owners_node_id_fkey":
		n.fence() // this node's row is gone: it was deemed dead
		return "", errRejoining
	case errors.As(err, &pe) && (pe.Code == "23503" || pe.Code == "22021"):
		// No such conversation (the foreign key), or an id PostgreSQL cannot even hold.
		return "", fmt.Errorf("claim %s: %w", convID, store.ErrNotFound)
	case err != nil:
		return "", fmt.Errorf("claim conversation: %w", err)
	case owner == nil:
		return "", fault.New(fault.KindServiceUnavailable, "the conversation is moving between processes; try again", nil)
	case *owner == "":
		n.fence() // the database does not see this node alive (its session went away)
		return "", errRejoining
	}
	return *owner, nil
}

// errRejoining: this node stopped its conversations (fenced) and has not re-joined yet.
var errRejoining = fault.New(fault.KindServiceUnavailable, "this server is re-joining the cluster; try again in a moment", nil)

// ReleaseAllBut implements agent.Cluster.
func (n *Node) ReleaseAllBut(ctx context.Context, keep []string) error {
	if n.ctx.Err() != nil || n.pool == nil {
		return nil
	}
	if keep == nil {
		keep = []string{}
	}
	if _, err := n.pool.Exec(ctx, `DELETE FROM conversation_owners WHERE node_id = $1 AND NOT (conversation_id = ANY($2))`, n.id, keep); err != nil {
		return fmt.Errorf("release conversations: %w", err)
	}
	n.broadcast(ctx, message{T: "left"})
	return nil
}

// Release implements agent.Cluster: the row goes, and the others look for orphans now. A node
// that has left (or halted) releases nothing: its rows went, or go stale, with it.
func (n *Node) Release(ctx context.Context, convID string) error {
	if n.ctx.Err() != nil {
		return nil
	}
	if _, err := n.pool.Exec(ctx, `DELETE FROM conversation_owners WHERE conversation_id = $1 AND node_id = $2`, convID, n.id); err != nil {
		return fmt.Errorf("release conversation: %w", err)
	}
	n.broadcast(ctx, message{T: "left"})
	return nil
}

// Owner implements agent.Cluster.
func (n *Node) Owner(ctx context.Context, convID string) (string, error) {
	var owner string
	err := n.pool.QueryRow(ctx, `SELECT o.node_id FROM conversation_owners o
		WHERE o.conversation_id = $1 AND parley_node_alive(o.node_id, $2::interval)`, convID, n.interval()).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "22021" {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read conversation owner: %w", err)
	}
	return owner, nil
}

// Orphans implements agent.Cluster. The dead processes are found first (a handful of rows);
// their active conversations come from the owners' node index. full adds the active
// conversations without any owner row.
func (n *Node) Orphans(ctx context.Context, limit int, full bool) ([]string, error) {
	q := `WITH dead AS MATERIALIZED (SELECT id FROM cluster_nodes WHERE NOT parley_node_alive(id, $1::interval))
		SELECT o.conversation_id FROM conversation_owners o JOIN conversations c ON c.id = o.conversation_id
		WHERE o.node_id IN (SELECT id FROM dead) AND c.status <> 'idle' LIMIT $2`
	if full {
		q = `WITH live AS MATERIALIZED (SELECT id FROM cluster_nodes WHERE parley_node_alive(id, $1::interval))
			SELECT c.id FROM conversations c WHERE c.status <> 'idle' AND NOT EXISTS (
				SELECT 1 FROM conversation_owners o JOIN live ON live.id = o.node_id WHERE o.conversation_id = c.id)
			LIMIT $2`
	}
	rows, err := n.pool.Query(ctx, q, n.interval(), limit)
	if err != nil {
		return nil, fmt.Errorf("list orphans: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list orphans: %w", err)
	}
	return ids, nil
}

// SetClients implements agent.Cluster.
func (n *Node) SetClients(ctx context.Context, convID string, count int, version int64) error {
	if _, err := n.pool.Exec(ctx, `INSERT INTO client_presence (node_id, conversation_id, sockets, version) VALUES ($1, $2, $3, $4)
		ON CONFLICT (conversation_id, node_id) DO UPDATE SET sockets = EXCLUDED.sockets, version = EXCLUDED.version
		WHERE client_presence.version < EXCLUDED.version`, n.id, convID, max(count, 0), version); err != nil {
		return fmt.Errorf("record page sockets: %w", err)
	}
	n.broadcast(ctx, message{T: "ring", Conv: convID})
	return nil
}

// RemoteClients implements agent.Cluster.
func (n *Node) RemoteClients(ctx context.Context, convID string) (int, error) {
	var count int
	err := n.pool.QueryRow(ctx, `SELECT coalesce(sum(p.sockets), 0) FROM client_presence p
		WHERE p.conversation_id = $1 AND p.node_id <> $2 AND parley_node_alive(p.node_id, $3::interval)`, convID, n.id, n.interval()).Scan(&count)
	if err != nil {
		return 0, fmt.Errorf("count page sockets: %w", err)
	}
	return count, nil
}
