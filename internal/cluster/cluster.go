// Package cluster lets several Parley processes share one PostgreSQL database. PostgreSQL is
// the coordinator and nothing else is: each process keeps a heartbeat row (cluster_nodes); a
// conversation is owned by the process whose row in conversation_owners names it while that
// process's heartbeat is fresh; requests for a conversation owned elsewhere are forwarded to
// the owner with NOTIFY on the owner's channel and answered on the sender's (rows too large for
// a notification go through cluster_mail); events cross processes on one broadcast channel.
//
// A Node implements agent.Cluster (ownership, forwarding, page sockets) and agent.Events (the
// process's hub, plus the other processes' events). The agent decides what to do with them
// (internal/agent/cluster.go); this package only moves bytes and keeps rows.
//
// Goroutines: Start begins three, all owned by the Node and ended by Leave: the listener (one
// dedicated connection that LISTENs), the heartbeat, and the event sender. Forwarded requests
// are served on goroutines bounded by maxServing.
package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"parley/internal/agent"
	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/metrics"
	"parley/internal/store"
)

// Defaults and bounds.
const (
	// DefaultConns is the node's pool size: claims, forwards, replies and event batches.
	DefaultConns = 8
	// DefaultTTL is how long a process counts as alive after its last heartbeat; it beats every
	// TTL/3. A killed process's conversations are taken over within TTL plus the agent's
	// orphan scan.
	DefaultTTL = 6 * time.Second
	// eventsChannel carries every process's events, rings and departures.
	eventsChannel = "parley_events"
	// maxPayload bounds a notification's plain text so that, sealed (nonce and tag, 28 bytes)
	// and in base64 (4/3), it stays under PostgreSQL's 8000-byte limit; larger messages go
	// through cluster_mail.
	maxPayload = 5600
	// outQueue bounds the events waiting to be sent. When it is full an event is dropped and
	// the other processes' subscribers of its conversation get resync instead (they reload).
	outQueue = 4096
	// maxDropped bounds the conversations remembered as having lost events; beyond it every
	// remote subscriber is told to resync.
	maxDropped = 1024
	// sendBatch bounds the notifications sent in one round trip.
	sendBatch = 256
	// maxServing bounds forwarded requests served at once; the listener waits for room.
	maxServing = 256
	// mailTTL is how long an unread cluster_mail row is kept.
	mailTTL = time.Minute
	// deltaMerge bounds the text of text deltas merged into one notification, as JSON writes
	// it (escapedLen): merged deltas always fit in a notification.
	deltaMerge = 2048
	// deltaEvery is how often a conversation's streamed text is sent to the other processes
	// (at most 20 notifications a second per streaming conversation).
	deltaEvery = 50 * time.Millisecond
	// maxPackedReply bounds a reply that rides in the events' notification; a larger one is
	// sent on its own, as before.
	maxPackedReply = 2048
	// replyTimeout bounds sending one reply alone, replyAllTimeout all of a batch (replyAll).
	replyTimeout    = 5 * time.Second
	replyAllTimeout = time.Minute
)

// Config configures a Node.
type Config struct {
	// Pool is the store's pool. The node copies its settings and opens connections of its own
	// (Conns, plus one that listens), so coordinating never waits behind the store's queries.
	Pool *pgxpool.Pool
	// Conns bounds the node's own connections besides the listener (default DefaultConns).
	Conns  int32
	Logger *slog.Logger
	// TTL is how long a heartbeat keeps a process alive (default DefaultTTL).
	TTL time.Duration
	// Clock paces the heartbeat and the owner checks of forwarded requests (default the wall
	// clock). Liveness itself is judged on the database's clock, the one all processes share.
	Clock clock.Clock
	// SubscriberBuffer is each local subscription's buffer (agent.NewHub).
	SubscriberBuffer int
	// Key seals every notification and every body waiting in cluster_mail (KeySize bytes; key.go).
	// Every process of the cluster has the same; it is never in the database. Start refuses
	// to begin without one.
	Key []byte
	// PreviousKey, during a rotation, also opens what the others sealed (nil: none).
	PreviousKey []byte
	// OwnKey says Key was made for this process alone (none was configured): the node says so
	// loudly when it meets other processes, whose notifications it cannot open.
	OwnKey bool
}

// Node is this process in the cluster.
type Node struct {
	src   *pgxpool.Pool // the store's pool, whose settings Start copies
	conns int32
	pool  *pgxpool.Pool // the node's own, opened by Start
	log   *slog.Logger
	clock clock.Clock
	ttl   time.Duration
	id    string
	hub   *agent.Hub

	in atomic.Pointer[agent.Inbound]
	// fenced is set when the node stopped its actors because it could not prove it was alive;
	// until it re-joined (its ownerships given up, its heartbeat and session back) it claims
	// nothing.
	fenced atomic.Bool
	// keys seal every notification and mail body with the cluster's key (key.go); keyErr
	// is why there are none (Start returns it). ownKey: Config.OwnKey.
	keys   *keyring
	keyErr error
	ownKey bool

	lmu     sync.Mutex
	lcancel context.CancelFunc // ends the listener's current wait (restartListener); guarded by lmu
	// peers is how many other live processes the last heartbeat saw (or 1 once any of them
	// spoke): events are sent only when someone can receive them.
	peers atomic.Int64

	out     chan agent.Event
	queued  atomic.Int64 // events put in out so far (packedReply.after)
	dropMu  sync.Mutex
	dropped map[string]bool // conversations whose events were dropped; guarded by dropMu
	dropAll bool            // guarded by dropMu
	seq     atomic.Uint64   // makes every payload unique (PostgreSQL folds identical ones)

	waitMu  sync.Mutex
	waiting map[uint64]waiter // forwarded requests awaiting their reply; guarded by waitMu
	nextReq atomic.Uint64

	// replies holds the replies to forwarded requests that go out with the next events (the
	// sender's); repMu guards repClosed, set once the sender stopped taking them.
	replies   chan packedReply
	repMu     sync.Mutex
	repClosed bool

	serving  chan struct{} // semaphore of forwarded requests being served
	refusing chan struct{} // semaphore of busy replies being sent (serving was full)

	// replays remembers the messages heard lately, per sender; owned by the listener, as is
	// replayWarned (when a refusal was last logged).
	replays      replayGuard
	replayWarned time.Time
	// foreignWarned is when a notification not sealed by this cluster was last logged (a flood
	// logs once per 10 s); the listener's.
	foreignWarned time.Time
	listenedAt    atomic.Int64 // when the listener last began to listen (Unix ms)

	stats struct {
		notifications, forwarded, served, packed, direct, heartbeats, claims, deafRestarts, undecoded, replays, departures atomic.Int64
	}

	// The heartbeat pings the node's own channel with each beat (pingSent, in the same
	// statement) and the listener records the pings it hears (pingHeard): a listener
	// that stopped hearing while its session still looks alive to the database is restarted.
	pingSent, pingHeard atomic.Uint64
	deaf                atomic.Bool // tests: the listener ignores pings
	lastPing, prevPing  uint64      // the pings of the last two beats; owned by the heartbeat

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

var (
	_ agent.Cluster = (*Node)(nil)
	_ agent.Events  = (*Node)(nil)
)

// New builds a Node with a fresh id; Start registers it.
func New(cfg Config) *Node {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Conns <= 0 {
		cfg.Conns = DefaultConns
	}
	if cfg.SubscriberBuffer <= 0 {
		cfg.SubscriberBuffer = 256
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	keys, keyErr := newKeyring(cfg.Key, cfg.PreviousKey)
	return &Node{
		keys: keys, keyErr: keyErr, ownKey: cfg.OwnKey,
		src: cfg.Pool, conns: cfg.Conns, log: cfg.Logger.With("node", id), clock: cfg.Clock, ttl: cfg.TTL, id: id,
		hub: agent.NewHub(cfg.SubscriberBuffer), out: make(chan agent.Event, outQueue),
		dropped: map[string]bool{}, waiting: map[uint64]waiter{}, serving: make(chan struct{}, maxServing), refusing: make(chan struct{}, maxServing),
		replies: make(chan packedReply, maxServing),
		ctx:     ctx, cancel: cancel,
	}
}

// Stats counts what the node sent and did since it started, for benchmarks and /metrics.
type Stats struct {
	Notifications int64 // NOTIFY payloads sent (events, control messages, requests, replies)
	Forwarded     int64 // requests forwarded to another process
	Served        int64 // requests served for another process
	PackedReplies int64 // replies to forwarded requests sent in the notification of events
	DirectReplies int64 // replies sent alone on the caller's channel (large, queue full, closing, or an older caller)
	Heartbeats    int64 // heartbeat writes
	Claims        int64 // claims asked of the database (a request that landed here without an owner hint)
	DeafRestarts  int64 // listener restarts because it stopped hearing the node's own pings
	Undecoded     int64 // notifications of events left undecoded: nobody here followed their conversations
	Replays       int64 // notifications refused as heard before, too old, or moved from another channel
	Departures    int64 // departures ("left") heard from other processes and acted on (hints dropped, a scan asked)
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	return Stats{Notifications: n.stats.notifications.Load(), Forwarded: n.stats.forwarded.Load(),
		Served: n.stats.served.Load(), PackedReplies: n.stats.packed.Load(), DirectReplies: n.stats.direct.Load(), Heartbeats: n.stats.heartbeats.Load(), Claims: n.stats.claims.Load(),
		DeafRestarts: n.stats.deafRestarts.Load(), Undecoded: n.stats.undecoded.Load(), Replays: n.stats.replays.Load(),
		Departures: n.stats.departures.Load()}
}

// Self implements agent.Cluster.
func (n *Node) Self() string { return n.id }

// Serve implements agent.Cluster.
func (n *Node) Serve(in agent.Inbound) { n.in.Store(&in) }

func (n *Node) channel() string { return nodeChannel(n.id) }

func nodeChannel(id string) string { return "parley_n_" + id }

func (n *Node) interval() string { return fmt.Sprintf("%d milliseconds", n.ttl.Milliseconds()) }

// Start registers the node, begins listening and beating, and tells the others it arrived.
func (n *Node) Start(ctx context.Context) error {
	if n.keyErr != nil {
		return n.keyErr
	}
	pcfg := n.src.Config()
	pcfg.MaxConns, pcfg.MinConns = n.conns, 0
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("cluster: open the node's connections: %w", err)
	}
	n.pool = pool
	if err := n.start(ctx); err != nil {
		pool.Close()
		return err
	}
	return nil
}

func (n *Node) start(ctx context.Context) error {
	host, _ := os.Hostname()
	if _, err := n.pool.Exec(ctx, `INSERT INTO cluster_nodes (id, host) VALUES ($1, $2)`, n.id, fmt.Sprintf("%s:%d", host, os.Getpid())); err != nil {
		return fmt.Errorf("cluster: register node: %w", err)
	}
	// One listening session, on the node's own channel (requests and replies) and the broadcast
	// events: every notification wakes every listening session of the database, whatever its
	// channel, so a second session per process would double what each notification costs
	// PostgreSQL. The session is also the node's life line.
	conn, err := n.listenConn(ctx)
	if err != nil {
		return err
	}
	if err := n.countPeers(ctx); err != nil {
		_ = conn.Close(ctx)
		return err
	}
	n.wg.Add(3)
	go n.listen(conn)
	go n.heartbeat()
	go n.send()
	n.broadcast(ctx, message{T: "hello"})
	n.log.Info("cluster node started", "ttl", n.ttl, "peers", n.peers.Load())
	if n.ownKey && n.peers.Load() > 0 {
		n.log.Error("cluster: other processes are alive on this database, but this one has no cluster key configured (PARLEY_CLUSTER_KEY) and made its own: it cannot exchange requests or events with them; give every process the same key",
			"peers", n.peers.Load())
	}
	return nil
}

// seal encrypts and authenticates a notification's payload; open reverses it and refuses
// whatever the cluster's keys did not seal (another role's NOTIFY).
func (n *Node) seal(plain []byte) string {
	return base64.StdEncoding.EncodeToString(n.keys.seal(plain, []byte(noteAD)))
}

func (n *Node) open(payload string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return nil, errors.New("not a sealed notification")
	}
	return n.keys.open(b, []byte(noteAD))
}

// Leave stops the node's goroutines and leaves the cluster: its row (and so its conversations
// and page sockets) is deleted and the others look for its conversations at once. Call it after
// the agent's Manager closed; leaving twice is harmless.
func (n *Node) Leave(ctx context.Context) error {
	var err error
	n.once.Do(func() {
		n.cancel()
		n.wg.Wait()
		if n.pool == nil {
			return // never started
		}
		if _, derr := n.pool.Exec(ctx, `DELETE FROM cluster_nodes WHERE id = $1`, n.id); derr != nil {
			err = fmt.Errorf("cluster: leave: %w", derr)
		}
		n.broadcast(ctx, message{T: "left"})
		if n.pool != nil {
			n.pool.Close()
		}
	})
	return err
}

// --- ownership ------------------------------------------------------------------------------

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

// --- forwarding -----------------------------------------------------------------------------

// message is one notification's payload.
type message struct {
	T    string `json:"t"`              // req, rep, ev, evs (events packed in an array), ring, left, hello, resync
	From string `json:"from,omitempty"` // the sending node
	N    uint64 `json:"n,omitempty"`    // unique per sender: identical payloads are not folded
	ID   uint64 `json:"id,omitempty"`   // a request and its reply
	Conv string `json:"conv,omitempty"`
	// Convs, on evs whose events are of several conversations: those conversations.
	Convs []string        `json:"convs,omitempty"`
	Body  json.RawMessage `json:"body,omitempty"`
	Mail  int64           `json:"mail,omitempty"` // the body is in cluster_mail
	// Pack, on a request: the sender reads replies packed with events (Reps), so the reply may
	// ride in the notification that carries the events the request produced.
	Pack bool `json:"pack,omitempty"`
	// Reps, on evs and reps: replies to forwarded requests, each for the node To.
	Reps []packedReply `json:"reps,omitempty"`
	// Ch and At, sealed with the rest: the channel the message was sent on and when (Unix ms,
	// the sender's clock). A receiver refuses a message heard on another channel, one heard
	// before (From, N) and one too old (replay.go), so a sealed payload that whoever can LISTEN
	// on the database replays is not acted on twice. A message without them (an older build's)
	// is taken as before.
	Ch string `json:"ch,omitempty"`
	At int64  `json:"at,omitempty"`
}

// packedReply is a reply to a forwarded request carried with events.
type packedReply struct {
	To   string          `json:"to"`
	ID   uint64          `json:"id"`
	Body json.RawMessage `json:"body"`
	// after is how many events had been queued for the sender when the reply was: it goes once
	// the sender has taken them all (in this batch or an earlier one).
	after int64
}

// Forward implements agent.Cluster.
func (n *Node) Forward(ctx context.Context, node string, body []byte) ([]byte, error) {
	n.stats.forwarded.Add(1)
	id := n.nextReq.Add(1)
	reply := make(chan message, 1)
	n.waitMu.Lock()
	n.waiting[id] = waiter{node: node, c: reply}
	n.waitMu.Unlock()
	defer func() {
		n.waitMu.Lock()
		delete(n.waiting, id)
		n.waitMu.Unlock()
	}()
	if err := n.notify(ctx, nodeChannel(node), message{T: "req", ID: id, Body: body, Pack: true}); err != nil {
		return nil, err
	}
	// While waiting, look every TTL/3 whether the owner is still alive: a killed owner never
	// answers, and once its heartbeat is stale the conversation can be claimed here.
	check := n.clock.NewTimer(n.ttl / 3)
	defer check.Stop()
	for {
		select {
		case msg := <-reply:
			// A reply too large for a notification waits in cluster_mail: read here, so the
			// listener never waits on the database.
			return n.body(ctx, msg, true)
		case <-ctx.Done():
			return nil, fmt.Errorf("forward to %s: %w", node, ctx.Err())
		case <-n.ctx.Done():
			return nil, errors.New("forward: the node is closing")
		case <-check.C():
			var alive bool
			err := n.pool.QueryRow(ctx, `SELECT parley_node_alive($1, $2::interval)`, node, n.interval()).Scan(&alive)
			if err == nil && !alive {
				return nil, fmt.Errorf("forward to %s: %w", node, agent.ErrOwnerGone)
			}
			check.Reset(n.ttl / 3)
		}
	}
}

// serve answers one forwarded request on its own goroutine and replies on the sender's channel.
func (n *Node) serve(msg message) {
	defer func() { <-n.serving }()
	defer n.wg.Done()
	n.stats.served.Add(1)
	metrics.ClusterServed.Inc()
	out := []byte(`{"moved":true}`)
	if in := n.in.Load(); in != nil && in.Forward != nil {
		ctx, cancel := context.WithTimeout(n.ctx, agent.DefaultForwardTimeout)
		// A request too large for a notification waits in cluster_mail: read here, off the
		// listener. One that cannot be read was not taken: the sender is told so at once.
		if body, err := n.body(ctx, msg, true); err != nil {
			n.log.Warn("cluster: forwarded request", "err", err)
			out = unreadable
		} else {
			out = in.Forward(ctx, body)
		}
		cancel()
	}
	// The request's events were published before its answer came back: the sender packs the
	// reply with them (or with the next events) when it can, which saves a notification — a
	// commit on PostgreSQL's notification queue and a wake-up of every listener.
	if msg.Pack && len(out) <= maxPackedReply && n.packReply(packedReply{To: msg.From, ID: msg.ID, Body: out}) {
		return
	}
	n.reply(packedReply{To: msg.From, ID: msg.ID, Body: out})
}

// packReply hands r to the sender; false when the sender stopped or its queue is full.
func (n *Node) packReply(r packedReply) bool {
	r.after = n.queued.Load()
	n.repMu.Lock()
	defer n.repMu.Unlock()
	if n.repClosed {
		return false
	}
	select {
	case n.replies <- r:
		return true
	default:
		return false
	}
}

// reply sends r alone on its node's channel (through cluster_mail when large), even while the
// node is closing.
func (n *Node) reply(r packedReply) { n.replyAll([]packedReply{r}) }

// replyAll sends rs alone, in order, even while the node is closing: each within replyTimeout,
// all within replyAllTimeout. Once one times out (the database does not answer) the rest are
// dropped, logged once (their callers time out and are told to reload), so a database that
// hangs holds a failed batch or a closing sender up for replyTimeout, not that much per reply,
// and a slow one for replyAllTimeout at most.
func (n *Node) replyAll(rs []packedReply) {
	all, cancel := context.WithTimeout(context.WithoutCancel(n.ctx), replyAllTimeout)
	defer cancel()
	for i, r := range rs {
		n.stats.direct.Add(1)
		ctx, done := context.WithTimeout(all, replyTimeout)
		err := n.notify(ctx, nodeChannel(r.To), message{T: "rep", ID: r.ID, Body: r.Body})
		timedOut := ctx.Err() != nil
		done()
		if err != nil {
			n.log.Warn("cluster: reply to a forwarded request", "to", r.To, "err", err)
		}
		if timedOut && i+1 < len(rs) {
			n.log.Warn("cluster: the database did not take a reply in time; dropped the replies after it", "dropped", len(rs)-i-1)
			return
		}
	}
}

// waiter is a forwarded request awaiting its reply from node.
type waiter struct {
	node string
	c    chan message
}

// deliver hands a reply to the forwarded request waiting for it, if any still waits and the
// reply comes from the node it was sent to.
func (n *Node) deliver(msg message) {
	n.waitMu.Lock()
	w, ok := n.waiting[msg.ID]
	n.waitMu.Unlock()
	if !ok || w.node != msg.From {
		return
	}
	select {
	case w.c <- msg:
	default:
	}
}

// busy is the reply to a request that came while maxServing others were in service.
var busy = []byte(`{"err":{"kind":"` + string(fault.KindServiceUnavailable) + `","message":"the process that runs this conversation is too busy to take the request; try again"}}`)

// unreadable is the reply to a request whose body could not be read (its cluster_mail row was
// gone): an agent wireResponse with a service_unavailable error.
var unreadable = []byte(`{"err":{"kind":"` + string(fault.KindServiceUnavailable) + `","message":"the request could not be read by the process that runs the conversation; try again"}}`)

// notify sends msg on channel, through cluster_mail when it is too large: the one reader of a
// request or reply deletes the row; the rows of broadcasts (many readers) are swept.
func (n *Node) notify(ctx context.Context, channel string, msg message) error {
	payload, err := n.payload(ctx, channel, msg)
	if err != nil {
		return err
	}
	n.stats.notifications.Add(1)
	metrics.ClusterNotifications.Inc()
	if _, err := n.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		return fmt.Errorf("notify %s: %w", channel, err)
	}
	return nil
}

// payload seals msg for a notification on channel, moving its body to cluster_mail when it
// would not fit.
func (n *Node) payload(ctx context.Context, channel string, msg message) (string, error) {
	msg.From, msg.N, msg.Ch, msg.At = n.id, n.seq.Add(1), channel, n.clock.Now().UnixMilli()
	plain, err := json.Marshal(msg)
	if err != nil {
		return "", fmt.Errorf("encode notification: %w", err)
	}
	if len(plain) > maxPayload {
		// Sealed too, and bound to this notification (mailBinding): the row can be neither
		// read nor moved under another notification by whoever may read or write the table.
		var id int64
		if err := n.pool.QueryRow(ctx, `INSERT INTO cluster_mail (body) VALUES ($1) RETURNING id`, n.keys.seal(msg.Body, mailBinding(msg))).Scan(&id); err != nil {
			return "", fmt.Errorf("write cluster mail: %w", err)
		}
		msg.Body, msg.Mail = nil, id
		if plain, err = json.Marshal(msg); err != nil {
			return "", fmt.Errorf("encode notification: %w", err)
		}
	}
	return n.seal(plain), nil
}

// broadcast sends a small control message to every process, logging a failure: the periodic
// scans and re-checks make up for a lost one.
func (n *Node) broadcast(ctx context.Context, msg message) {
	if err := n.notify(ctx, eventsChannel, msg); err != nil && n.ctx.Err() == nil {
		n.log.Warn("cluster: broadcast", "t", msg.T, "err", err)
	}
}

// body returns a message's body, reading it from cluster_mail when it was too large (and
// refusing a row not sealed for this message).
func (n *Node) body(ctx context.Context, msg message, del bool) ([]byte, error) {
	if msg.Mail == 0 {
		return msg.Body, nil
	}
	q := `SELECT body FROM cluster_mail WHERE id = $1`
	if del {
		q = `DELETE FROM cluster_mail WHERE id = $1 RETURNING body`
	}
	var b []byte
	if err := n.pool.QueryRow(ctx, q, msg.Mail).Scan(&b); err != nil {
		return nil, fmt.Errorf("read cluster mail %d: %w", msg.Mail, err)
	}
	body, err := n.keys.open(b, mailBinding(msg))
	if err != nil {
		return nil, fmt.Errorf("cluster mail %d: %w for this notification", msg.Mail, err)
	}
	return body, nil
}

// --- listening ------------------------------------------------------------------------------

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
	if _, err := n.pool.Exec(ctx, `UPDATE cluster_nodes SET backend_pid = $2 WHERE id = $1`, n.id, pid); err != nil {
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
				backoff = min(backoff*2, 5*time.Second)
				continue
			}
			conn, backoff = c, 100*time.Millisecond
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

// --- heartbeat ------------------------------------------------------------------------------

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
