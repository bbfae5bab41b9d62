package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"parley/internal/agent"
	"parley/internal/metrics"
)

// listenConn opens the connection that LISTENs on the node's own channel and on the events:
// it stays with the node, outside any pool.
func (n *Node) listenConn(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, n.pool.Config().ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen connection: %w", err)
	}
	n.listenedAt.Store(n.clock.Now().UnixMilli()) // nothing sent before the LISTEN is heard
	for _, ch := range []string{n.channel(), eventsChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			_ = conn.Close(ctx)
			return nil, fmt.Errorf("cluster: listen on %s: %w", ch, err)
		}
	}
	// This session is the node's life line (parley_node_alive): when the process dies, so
	// does the session, and the others see it at once.
	// pg_backend_pid, not the protocol's key data: behind a session pooler the latter is the
	// pooler's.
	var pid int32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("cluster: listening session: %w", err)
	}
	// An upsert: after a long partition the others swept this node's row (and its ownerships
	// with it); the row comes back with the session, so the next beat sees the node alive and
	// it re-joins, instead of being deemed dead beat after beat.
	if _, err := n.pool.Exec(ctx, `INSERT INTO cluster_nodes (id, host, backend_pid) VALUES ($1, $3, $2)
		ON CONFLICT (id) DO UPDATE SET backend_pid = EXCLUDED.backend_pid`, n.id, pid, n.host()); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("cluster: record the listening session: %w", err)
	}
	return conn, nil
}

// listen receives notifications until the node closes, reconnecting when its connection
// breaks. Notifications sent while it was away are lost: local subscribers resync, and
// forwarded requests waiting for a reply time out and look for their owner again. Losing the
// connection also fences the node: the others saw its session end.
func (n *Node) listen(conn *pgx.Conn) {
	defer n.wg.Done()
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	backoff := 100 * time.Millisecond
	for n.ctx.Err() == nil {
		if conn == nil {
			c, err := n.listenConn(n.ctx)
			if err != nil {
				if n.ctx.Err() == nil {
					n.log.Warn("cluster: reconnect listener", "err", err)
				}
				wait := n.clock.NewTimer(backoff)
				select {
				case <-n.ctx.Done():
				case <-wait.C():
				}
				wait.Stop()
				backoff = min(backoff*2, time.Second) // back within a second of the database's return
				continue
			}
			conn, backoff = c, 100*time.Millisecond
			n.listening.Store(true)
			n.kickHeartbeat() // re-join now, not at the next beat
			n.hub.Resync("")
			n.broadcast(n.ctx, message{T: "hello"}) // the others send events again
		}
		lctx, lcancel := context.WithCancel(n.ctx)
		n.lmu.Lock()
		n.lcancel = lcancel
		n.lmu.Unlock()
		note, err := conn.WaitForNotification(lctx)
		lcancel()
		if err != nil {
			if n.ctx.Err() == nil {
				// Without its session the node counts as dead to the others (it is its life
				// line), who may take its conversations over: stop them here before listening
				// again. Its pages missed events meanwhile.
				n.log.Warn("cluster: listener lost its connection; stopping this process's conversations", "err", err)
				_ = conn.Close(context.Background())
				conn = nil
				n.listening.Store(false)
				n.fence()
				n.hub.Resync("")
			}
			continue
		}
		n.receive(note)
	}
}

// restartListener makes the listener drop its connection and listen on a new one (the
// heartbeat found the node's session gone from the database's view, or its own ping unheard,
// while the socket looked alive).
func (n *Node) restartListener() {
	n.lmu.Lock()
	defer n.lmu.Unlock()
	if n.lcancel != nil {
		n.lcancel()
	}
}

// receive handles one notification. Events are published here, in the order they came, so a
// subscriber sees a conversation's events in the order its owner published them.
func (n *Node) receive(note *pgconn.Notification) {
	plain, err := n.open(note.Payload)
	if err != nil {
		// Not sealed with the cluster's key: someone else's NOTIFY on our channels, or another
		// process's when this one made its own key. A flood logs once per 10 s.
		metrics.ClusterRefused.WithLabelValues("unsealed").Inc()
		if now := n.clock.Now(); now.Sub(n.foreignWarned) >= 10*time.Second {
			n.foreignWarned = now
			if n.ownKey {
				n.log.Error("cluster: refused a notification not sealed with this process's own key: set the same PARLEY_CLUSTER_KEY on every process", "channel", note.Channel)
			} else {
				n.log.Warn("cluster: refused a notification not sealed by this cluster", "channel", note.Channel)
			}
		}
		return
	}
	// The node's own broadcasts come back to it: most of what this listener decodes is events,
	// so its own are skipped before decoding.
	if ownBroadcast(plain, n.id) {
		return
	}
	var msg message
	if err := json.Unmarshal(plain, &msg); err != nil {
		n.log.Warn("cluster: undecodable notification", "channel", note.Channel, "err", err)
		return
	}
	if msg.Ch != "" && !n.replays.fresh(note.Channel, msg, n.clock.Now(), n.listenedAt.Load()) {
		refused := n.stats.replays.Add(1)
		metrics.ClusterRefused.WithLabelValues("replayed").Inc()
		if now := n.clock.Now(); now.Sub(n.replayWarned) >= 10*time.Second { // a flood logs once per 10 s
			n.replayWarned = now
			n.log.Warn("cluster: refused a notification heard before, too old or moved from another channel",
				"channel", note.Channel, "t", msg.T, "from", msg.From, "refused_so_far", refused)
		}
		return
	}
	if msg.From == n.id {
		if msg.T == "ping" && !n.deaf.Load() {
			n.pingHeard.Store(msg.N)
		}
		return
	}
	if n.peers.Load() == 0 {
		n.peers.Store(1)
	}
	in := n.in.Load()
	switch msg.T {
	case "req":
		// The listener never waits: with maxServing requests in service, one more is answered
		// busy (by at most maxServing goroutines more; past them it is dropped and its sender
		// times out), so replies, events and pings keep being heard.
		select {
		case n.serving <- struct{}{}:
			n.wg.Add(1)
			go n.serve(msg)
		default:
			select {
			case n.refusing <- struct{}{}:
				n.wg.Add(1)
				go func() {
					defer func() { <-n.refusing }()
					defer n.wg.Done()
					n.reply(packedReply{To: msg.From, ID: msg.ID, Body: busy})
				}()
			default:
				n.log.Warn("cluster: dropped a forwarded request: too many in service", "from", msg.From)
			}
		}
	case "rep":
		n.deliver(msg)
	case "ev", "evs", "reps":
		if msg.T != "reps" {
			n.receiveEvents(msg, in)
		}
		// The replies after the events they follow: a request's answer reaches its caller
		// once the events it produced are published here.
		for _, r := range msg.Reps {
			if r.To == n.id {
				n.deliver(message{T: "rep", From: msg.From, ID: r.ID, Body: r.Body})
			}
		}
	case "resync":
		n.hub.Resync(msg.Conv)
	case "ring":
		if in != nil && in.Ring != nil {
			in.Ring(msg.Conv)
		}
	case "left":
		if in != nil && in.Rescan != nil {
			in.Rescan(msg.From)
		}
		n.stats.departures.Add(1)
	case "hello":
	}
}

// resync tells the local subscribers of the conversations of lost events to reload: conv's,
// else those of convs, else every subscriber (the conversations are not known).
func (n *Node) resync(conv string, convs []string) {
	if conv != "" || len(convs) == 0 {
		n.hub.Resync(conv)
		return
	}
	for _, c := range convs {
		n.hub.Resync(c)
	}
}

// ownBroadcast reports whether plain is a message sent by node id other than its ping (which
// its listener must hear), read from the head json.Marshal writes for a message — {"t":…,
// "from":… in the struct's order — without decoding the rest. Anything else reads as not
// its own, and is decoded as usual.
func ownBroadcast(plain []byte, id string) bool {
	rest, ok := bytes.CutPrefix(plain, []byte(`{"t":"`))
	if !ok {
		return false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 || string(rest[:end]) == "ping" {
		return false
	}
	rest, ok = bytes.CutPrefix(rest[end:], []byte(`","from":"`))
	if !ok || len(rest) <= len(id) || rest[len(id)] != '"' {
		return false
	}
	return string(rest[:len(id)]) == id
}

// receiveEvents publishes the events of an ev or evs message to the local subscribers. Events
// that no subscriber here follows are not decoded: only their conversations are read, from the
// message (a sender that does not name them has its events decoded).
func (n *Node) receiveEvents(msg message, in *agent.Inbound) {
	convs := msg.Convs
	if msg.Conv != "" {
		convs = []string{msg.Conv}
	}
	if len(convs) > 0 && !n.hub.Follows(convs) {
		n.stats.undecoded.Add(1)
		if in != nil && in.Owned != nil {
			for _, c := range convs {
				in.Owned(c, msg.From)
			}
		}
		return
	}
	body, err := n.body(n.ctx, msg, false)
	if err != nil {
		n.log.Warn("cluster: event", "err", err)
		n.resync(msg.Conv, msg.Convs)
		return
	}
	var events []wireEvent
	if msg.T == "ev" {
		events = make([]wireEvent, 1)
		err = json.Unmarshal(body, &events[0])
	} else {
		err = json.Unmarshal(body, &events)
	}
	if err != nil {
		n.log.Warn("cluster: undecodable event", "err", err)
		n.resync(msg.Conv, msg.Convs)
		return
	}
	for i, w := range events {
		e := w.Event
		e.Entries = w.Entries
		// The sender runs the conversation's actor: a hint of its owner, which saves the next
		// request landing here the claim's round trip.
		if in != nil && in.Owned != nil && (i == 0 || e.ConversationID != events[i-1].ConversationID) {
			in.Owned(e.ConversationID, msg.From)
		}
		n.hub.Publish(e)
	}
}
