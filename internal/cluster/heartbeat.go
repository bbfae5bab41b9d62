package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"parley/internal/metrics"
)

// heartbeat keeps the node's row fresh every TTL/3 on a connection of its own (so a busy pool
// never delays it), and checks that the database still sees the node alive (its listening
// session included). When it cannot prove that for TTL/2 — half the time after which the
// others may take its conversations over — or learns that it is not alive, it fences: every
// local actor stops and the node claims nothing. Once the database answers again it re-joins:
// it registers again if its row was swept, gives up every ownership (the others, or its own
// next scan, take the active conversations from the log), and is unfenced.
func (n *Node) heartbeat() {
	defer n.wg.Done()
	beat := n.ttl / 3
	t := n.clock.NewTimer(beat)
	defer t.Stop()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	lastOK := n.clock.Now()
	for i := 0; ; i++ {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C():
		case <-n.kick:
			if !t.Stop() {
				select { // a tick that came with the kick: this beat is it
				case <-t.C():
				default:
				}
			}
		}
		t.Reset(beat)
		began := n.clock.Now()
		alive, err := n.beat(&conn, beat/2)
		switch {
		case n.ctx.Err() != nil:
			return
		case err != nil:
			n.log.Warn("cluster: heartbeat", "err", err)
			if n.clock.Now().Sub(lastOK) > n.ttl/2 {
				n.fence()
			}
			continue
		case !alive:
			n.log.Error("cluster: the database does not see this process alive (row swept or listening session gone); re-joining")
			n.fence()
			n.restartListener()
			continue
		}
		lastOK = began
		if n.fenced.Load() {
			n.rejoin(conn)
		}
		n.checkPing()
		if err := n.countPeersOn(conn); err != nil && n.ctx.Err() == nil {
			n.log.Warn("cluster: count peers", "err", err)
		}
		if i%10 == 9 {
			n.sweep(conn)
		}
	}
}

// beat writes the heartbeat on the heartbeat's own connection, (re)opening it when needed,
// and reports whether the database sees the node alive.
func (n *Node) beat(conn **pgx.Conn, timeout time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(n.ctx, timeout)
	defer cancel()
	if *conn == nil {
		c, err := pgx.ConnectConfig(ctx, n.pool.Config().ConnConfig)
		if err != nil {
			return false, fmt.Errorf("heartbeat connection: %w", err)
		}
		*conn = c
	}
	n.stats.heartbeats.Add(1)
	// The beat also pings this node's own channel, in the same statement (no round trip, no
	// write of its own): the listener should hear it before the next beat (checkPing).
	ping, seq := n.sealedPing()
	var alive bool
	err := (*conn).QueryRow(ctx, `WITH beat AS (UPDATE cluster_nodes SET heartbeat_at = now() WHERE id = $1
		RETURNING parley_node_alive(id, $2::interval) AS alive)
		SELECT beat.alive FROM beat, (SELECT pg_notify($3, $4)) AS ping`, n.id, n.interval(), n.channel(), ping).Scan(&alive)
	if err == nil {
		n.pingSent.Store(seq)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // swept: deemed dead
	}
	if err != nil {
		_ = (*conn).Close(context.Background())
		*conn = nil
		return false, err
	}
	return alive, nil
}

// sealedPing returns a ping for the node's own channel and its sequence number.
func (n *Node) sealedPing() (string, uint64) {
	seq := n.seq.Add(1)
	plain, _ := json.Marshal(message{T: "ping", From: n.id, N: seq, Ch: n.channel(), At: n.clock.Now().UnixMilli()})
	return n.seal(plain), seq
}

// checkPing runs after a beat: when the ping of two beats ago (ample time) was not heard, the
// listener is deaf — its connection may hang while the database still sees the session, so the
// others keep forwarding requests that it never receives. It is restarted, which fences the
// node until it re-joins, and the others' requests go to whoever claims next.
func (n *Node) checkPing() {
	sent, heard := n.pingSent.Load(), n.pingHeard.Load()
	if n.prevPing != 0 && heard < n.prevPing {
		n.stats.deafRestarts.Add(1)
		n.log.Error("cluster: the listener did not hear this node's own ping; restarting it")
		n.restartListener()
		n.pingHeard.Store(sent) // a fresh start: the next check waits two beats again
		n.prevPing = 0
		return
	}
	n.prevPing, n.lastPing = n.lastPing, sent
}

// rejoin ends a fence once the database answers and sees the node beat: the row exists again,
// this node's ownerships are given up (it may have lost any of them; the conversations are
// continued from the log by whoever claims them next), the others and this node look for
// orphans, and claims are allowed again. The listener records its session by itself when it
// reconnects.
func (n *Node) rejoin(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(n.ctx, n.ttl/3)
	defer cancel()
	if _, err := conn.Exec(ctx, `INSERT INTO cluster_nodes (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()`, n.id); err != nil {
		n.log.Warn("cluster: re-join: register", "err", err)
		return
	}
	if _, err := conn.Exec(ctx, `DELETE FROM conversation_owners WHERE node_id = $1`, n.id); err != nil {
		n.log.Warn("cluster: re-join: give up ownerships", "err", err)
		return
	}
	n.fenced.Store(false)
	n.broadcast(ctx, message{T: "left"})
	if in := n.in.Load(); in != nil && in.Rescan != nil {
		in.Rescan("")
	}
	n.log.Info("cluster: re-joined")
}

// kickHeartbeat asks for a beat now (the listener is back: the node may re-join at once). One
// pending kick is enough; more are dropped.
func (n *Node) kickHeartbeat() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Ready implements agent.Cluster: nil when the node may take writes — not fenced, its listener
// holding its session — else service_unavailable.
func (n *Node) Ready() error {
	if n.fenced.Load() || !n.listening.Load() {
		return errRejoining
	}
	return nil
}

// fence stops every local actor once per loss of liveness (Inbound.Fence) and stops claims
// until the node re-joins.
func (n *Node) fence() {
	if !n.fenced.CompareAndSwap(false, true) {
		return
	}
	metrics.ClusterFences.Inc()
	if in := n.in.Load(); in != nil && in.Fence != nil {
		in.Fence()
	}
}

// countPeers reads how many other processes are alive.
func (n *Node) countPeers(ctx context.Context) error {
	var peers int64
	if err := n.pool.QueryRow(ctx, `SELECT count(*) FROM cluster_nodes WHERE id <> $1 AND parley_node_alive(id, $2::interval)`,
		n.id, n.interval()).Scan(&peers); err != nil {
		return fmt.Errorf("count peers: %w", err)
	}
	n.peers.Store(peers)
	metrics.ClusterPeers.Set(float64(peers))
	return nil
}

func (n *Node) countPeersOn(conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.ttl/3)
	defer cancel()
	var peers int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM cluster_nodes WHERE id <> $1 AND parley_node_alive(id, $2::interval)`,
		n.id, n.interval()).Scan(&peers); err != nil {
		return fmt.Errorf("count peers: %w", err)
	}
	n.peers.Store(peers)
	metrics.ClusterPeers.Set(float64(peers))
	return nil
}

// sweep deletes the rows of processes dead for ten TTLs (their conversations and page sockets
// go with them) and unread mail.
func (n *Node) sweep(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(n.ctx, n.ttl)
	defer cancel()
	if _, err := conn.Exec(ctx, `DELETE FROM cluster_nodes WHERE heartbeat_at < now() - $1::interval`,
		fmt.Sprintf("%d milliseconds", 10*n.ttl.Milliseconds())); err != nil && n.ctx.Err() == nil {
		n.log.Warn("cluster: sweep dead nodes", "err", err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM cluster_mail WHERE created_at < now() - $1::interval`,
		fmt.Sprintf("%d milliseconds", mailTTL.Milliseconds())); err != nil && n.ctx.Err() == nil {
		n.log.Warn("cluster: sweep mail", "err", err)
	}
}
