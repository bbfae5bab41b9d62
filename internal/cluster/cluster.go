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
//
// Files by concern: cluster.go the Node and its life (New, Start, Leave); ownership.go the
// conversation_owners and client_presence rows; forward.go requests to another process and
// their replies; listen.go the listener and what it receives; heartbeat.go liveness, fencing
// and re-joining; seal.go the cluster's key; events.go the event sender; replay.go the replay
// guard.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"parley/internal/agent"
	"parley/internal/clock"
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
	// (Conns, plus one that listens and one that beats), so coordinating never waits behind the
	// store's queries.
	Pool *pgxpool.Pool
	// Conns bounds the node's own pool, besides the listener's and the heartbeat's connections
	// (default DefaultConns).
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
	// listening is set while the listener holds its session (the node's life line, and where
	// replies to forwarded requests arrive); kick asks the heartbeat to beat at once, so a node
	// whose listener came back re-joins within a round trip rather than at the next beat.
	listening atomic.Bool
	kick      chan struct{}
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
		replies: make(chan packedReply, maxServing), kick: make(chan struct{}, 1),
		ctx: ctx, cancel: cancel,
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

// host names the process in its row: host name and pid.
func (n *Node) host() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

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
	if _, err := n.pool.Exec(ctx, `INSERT INTO cluster_nodes (id, host) VALUES ($1, $2)`, n.id, n.host()); err != nil {
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
	n.listening.Store(true)
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
