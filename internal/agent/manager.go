package agent

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"parley/internal/fault"
	"parley/internal/metrics"
)

// Manager is the registry of conversation actors: at most one live actor per conversation,
// started (rehydrated from the store) on demand and hibernated when idle. Its mutex guards only
// the registry and the socket counts; no I/O happens under it.
type Manager struct {
	cfg     Config
	events  Events
	cluster Cluster // nil: this process is the only one on its store

	// base is the context of every store write and every piece of work the actors start. It is
	// cancelled when Close's context runs out (a hard stop).
	base       context.Context
	baseCancel context.CancelFunc
	quit       chan struct{} // closed by Close: actors stop taking requests
	wg         sync.WaitGroup

	hintsMu sync.Mutex
	hints   map[string]hintOf // conversation → the process that owned it (cluster.go: hint)
	hintGen uint64            // counts the hints set; guarded by hintsMu
	left    map[string]uint64 // process → hintGen when it left: older hints naming it are void

	mu      sync.Mutex
	actors  map[string]*actor // guarded by mu
	clients map[string]int    // live sockets per conversation, guarded by mu
	// presenceSeq versions the socket counts written to the cluster (SetClients), so a late
	// write of an older count loses. Guarded by mu.
	presenceSeq int64
	// pending counts awaiting calls by kind per conversation, as its actor last reported them;
	// kept while the actor hibernates (the calls are still pending). Guarded by mu.
	pending map[string]pendingByKind
	// modelSlots holds a token per model call in flight (MaxModelCalls): a call waits for room.
	modelSlots chan struct{}
	// failures counts the consecutive failed appends of each conversation in this process, and
	// whether the last was the model's answer (writeFailure); an actor reads and clears its own
	// when it starts. Guarded by mu.
	failures map[string]writeFailure
	// unregister removes the manager's metrics source (set by Start).
	unregister func()
	closed     bool // guarded by mu
	started    bool // guarded by mu

	// Counters for metrics and tests.
	starts       atomic.Int64 // actors started
	hibernations atomic.Int64 // actors that hibernated
}

// New builds a Manager. It panics when Store, Provider or Tools is missing: that is a wiring
// mistake, not a runtime condition.
func New(cfg Config) *Manager {
	cfg, err := cfg.withDefaults()
	if err != nil {
		panic(err)
	}
	base, cancel := context.WithCancel(context.Background())
	return &Manager{
		cfg:        cfg,
		events:     cfg.Events,
		cluster:    cfg.Cluster,
		hints:      map[string]hintOf{},
		left:       map[string]uint64{},
		base:       base,
		baseCancel: cancel,
		quit:       make(chan struct{}),
		actors:     map[string]*actor{},
		clients:    map[string]int{},
		pending:    map[string]pendingByKind{},
		failures:   map[string]writeFailure{},
		modelSlots: make(chan struct{}, cfg.MaxModelCalls),
	}
}

// Start revives the conversations whose turn must go on by itself (reviveAtStart: interrupted
// turns continue, client calls get their grace) and starts the expiry poller. Call it once.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.closed || m.started {
		m.mu.Unlock()
		return errors.New("agent: Start called twice or after Close")
	}
	m.started = true
	m.unregister = metrics.Register(m.metricsSnapshot)
	m.mu.Unlock()
	if m.cluster != nil {
		// The active conversations without a live owner are taken over by the first scan; those
		// another live process owns stay there.
		rescan := make(chan struct{}, 1)
		m.cluster.Serve(Inbound{
			Forward: m.serveForward,
			Ring:    m.ringLocal,
			Owned:   m.setHint,
			Rescan: func(left string) {
				if left != "" {
					m.dropHintsOf(left)
				}
				select {
				case rescan <- struct{}{}:
				default:
				}
			},
			Fence: m.fence,
		})
		m.wg.Add(1)
		go m.scanOrphans(rescan)
	} else if err := m.reviveAtStart(ctx); err != nil {
		return err
	}
	timer := m.cfg.Clock.NewTimer(m.cfg.ExpiryPoll)
	m.wg.Add(1)
	go m.pollExpiries(timer)
	return nil
}

// Close stops taking requests and drains every actor: LLM streams are cancelled (their step is
// retried on revival), running server calls may finish and record their results until ctx is
// done; then they are cancelled and parked (re-dispatched with the same tool_call_id on
// revival). Close returns ctx.Err() when ctx ran out first, once the cancelled work has
// returned: a tool callback that ignores its context holds Close up.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	unregister := m.unregister
	m.mu.Unlock()
	if unregister != nil {
		defer unregister()
	}
	if ctx.Err() != nil {
		m.baseCancel()
	}
	if m.cluster != nil {
		m.releaseIdle(ctx)
	}
	close(m.quit)
	finished := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(finished)
	}()
	var err error
	select {
	case <-finished:
	case <-ctx.Done():
		m.baseCancel()
		err = ctx.Err()
		// Cancelled work reports back at once; wait for it so nothing outlives Close.
		<-finished
	}
	m.baseCancel()
	m.events.Close()
	return err
}

// ensureStarted returns the conversation's live actor, starting one when there is none. Under
// concurrent calls for one id exactly one actor starts; it loads its state in its own goroutine.
func (m *Manager) ensureStarted(id string) (*actor, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed()
	}
	if a := m.actors[id]; a != nil {
		return a, nil
	}
	a := newActor(m, id)
	m.actors[id] = a
	m.starts.Add(1)
	m.wg.Add(1)
	go a.run()
	return a, nil
}

// Ready is nil when the manager takes requests that write: it is not shutting down and, with
// several processes, this one holds its place in the cluster (it is not re-joining after
// losing the database). /readyz asks it after the store.
func (m *Manager) Ready() error {
	if m.isClosed() {
		return errClosed()
	}
	if m.cluster != nil {
		return m.cluster.Ready()
	}
	return nil
}

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// forget takes a out of the registry. It is the only place an entry is removed, and it removes
// a's only: a fresh actor registered for the same conversation since then stays.
func (m *Manager) forget(a *actor) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.actors[a.id] == a {
		delete(m.actors, a.id)
	}
}

func (m *Manager) live(id string) *actor {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.actors[id]
}

// call delivers req to the conversation's actor and waits for the answer: the local actor, or,
// when another live process owns the conversation, that process's (forward). A full mailbox
// blocks the caller until ctx is done. An actor that stops (hibernates) before answering did
// not process the request, so the request goes to a fresh actor; a request the owner did not
// take (it was leaving) looks for the owner again, up to maxHops times.
func (m *Manager) call(ctx context.Context, id string, req *request) (response, error) {
	req.reply = make(chan response, 1)
	req.origin = originOf(ctx, m.cfg.Clock)
	if (req.kind == reqSend || req.kind == reqResolve) && req.key == "" && m.cluster != nil {
		req.key = requestKey()
	}
	for try := 0; try < maxHops; try++ {
		a, owner, err := m.acquire(ctx, id, true)
		if err != nil {
			return response{}, err
		}
		if a == nil {
			resp, moved, err := m.forward(ctx, owner, id, req)
			if !moved {
				return resp, err
			}
			if err := m.pause(ctx, try+1); err != nil {
				return response{}, err
			}
			continue
		}
		resp, retry, err := m.deliver(ctx, a, req)
		if !retry {
			return resp, err
		}
	}
	if m.cluster != nil {
		return response{}, fault.New(fault.KindServiceUnavailable, "the conversation is moving between processes; try again", nil)
	}
	return response{}, m.internalError("deliver request", errors.New("the conversation's actor kept stopping"))
}

// deliver hands req to a and waits for its answer. retry reports that a stopped before it took
// the request (it hibernated or is shutting down): the request goes to the next actor.
func (m *Manager) deliver(ctx context.Context, a *actor, req *request) (resp response, retry bool, err error) {
	select {
	case a.mailbox <- req:
	case <-a.done:
		if a.loadErr != nil {
			return response{}, false, a.loadErr
		}
		return response{}, true, nil
	case <-ctx.Done():
		return response{}, false, ctx.Err()
	}
	select {
	case r := <-req.reply:
		return r, false, r.err
	case <-a.done:
		select {
		case r := <-req.reply:
			return r, false, r.err
		default:
		}
		if a.loadErr != nil {
			return response{}, false, a.loadErr
		}
		return response{}, true, nil
	case <-ctx.Done():
		return response{}, false, ctx.Err()
	}
}

// Stats are counters for metrics.
type Stats struct {
	LiveActors            int            // actors in memory now
	Pending               map[string]int // awaiting calls by pending kind (hibernated conversations included)
	ActorStarts           int64          // actors started (revivals included) since New
	Hibernations          int64          // actors that left memory after IdleTimeout
	DroppedSubscribers    int64          // subscribers closed with EventResync for lagging
	AttachedConversations int            // conversations with at least one live socket
}

// Stats reports the manager's counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	live, attached := len(m.actors), len(m.clients)
	pending := map[string]int{}
	for _, byKind := range m.pending {
		byKind.addTo(pending)
	}
	m.mu.Unlock()
	return Stats{LiveActors: live, ActorStarts: m.starts.Load(), Hibernations: m.hibernations.Load(),
		DroppedSubscribers: m.events.Dropped(), AttachedConversations: attached, Pending: pending}
}

// metricsSnapshot is the manager's source for /metrics, read at scrape time.
func (m *Manager) metricsSnapshot() metrics.Snapshot {
	st := m.Stats()
	return metrics.Snapshot{LiveActors: st.LiveActors, Pending: st.Pending,
		Dropped: map[string]int64{"subscriber": st.DroppedSubscribers}}
}

// setPending records a conversation's awaiting calls by kind (zero: none).
func (m *Manager) setPending(id string, byKind pendingByKind) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if byKind == (pendingByKind{}) {
		delete(m.pending, id)
		return
	}
	m.pending[id] = byKind
}

// AttachClient records a live socket of the conversation's owner: client calls can run. The
// returned function detaches it (call it once, when the socket closes). Pending client calls are
// not re-announced here: a connecting page reads them from View's Pending (kind client_exec).
// With a cluster the count is also written where every process sees it, and the conversation's
// actor is rung wherever it runs.
func (m *Manager) AttachClient(convID string) (detach func()) {
	m.changeClients(convID, +1)
	var once sync.Once
	return func() { once.Do(func() { m.changeClients(convID, -1) }) }
}

func (m *Manager) changeClients(convID string, delta int) {
	m.mu.Lock()
	m.clients[convID] += delta
	n := m.clients[convID]
	if n <= 0 {
		delete(m.clients, convID)
	}
	m.presenceSeq++
	version := m.presenceSeq
	a := m.actors[convID]
	m.mu.Unlock()
	ring(a)
	if m.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.base), 5*time.Second)
	defer cancel()
	if err := m.cluster.SetClients(ctx, convID, max(n, 0), version); err != nil {
		m.cfg.Logger.Warn("agent: record page sockets for the cluster", "conversation_id", convID, "err", err)
	}
}

// ring tells a live actor that its socket count changed; the doorbell coalesces.
func ring(a *actor) {
	if a == nil {
		return
	}
	select {
	case a.clientsChanged <- struct{}{}:
	default:
	}
}

// clientCount is how many pages of the conversation are open: here, or else on any live
// process of the cluster.
func (m *Manager) clientCount(id string) int {
	m.mu.Lock()
	n := m.clients[id]
	m.mu.Unlock()
	if n > 0 || m.cluster == nil {
		return n
	}
	ctx, cancel := context.WithTimeout(m.base, 2*time.Second)
	defer cancel()
	n, err := m.cluster.RemoteClients(ctx, id)
	if err != nil {
		if m.base.Err() == nil {
			m.cfg.Logger.Warn("agent: count page sockets in the cluster", "conversation_id", id, "err", err)
		}
		return 0
	}
	return n
}

// pollExpiries claims due durable expiries every ExpiryPoll and resolves each through the same
// path as a person's answer, as System. The first poll runs at once, so timers that came due
// while the process was down fire on start.
func (m *Manager) pollExpiries(timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(time.Duration)
}) {
	defer m.wg.Done()
	defer timer.Stop()
	m.fireDueExpiries()
	for {
		select {
		case <-m.quit:
			return
		case <-timer.C():
			began := m.cfg.Clock.Now()
			m.fireDueExpiries()
			// Measure the next poll from when this one began; when the clock moved a whole period
			// during the poll (a slow store, or a test advancing a fake clock) poll again at once.
			timer.Reset(max(m.cfg.ExpiryPoll-m.cfg.Clock.Now().Sub(began), 0))
		}
	}
}

func (m *Manager) fireDueExpiries() {
	const batch = 100
	for {
		due, err := m.cfg.Store.ClaimDueExpiries(m.base, m.cfg.Clock.Now(), m.cfg.ExpiryLease, batch)
		if err != nil {
			if m.base.Err() == nil {
				m.cfg.Logger.Error("claim due expiries", "err", err)
			}
			return
		}
		for _, e := range due {
			select {
			case <-m.quit:
				return
			default:
			}
			_, err := m.call(m.base, e.ConversationID, &request{kind: reqExpire, by: System, callID: e.ToolCallID})
			var te *fault.Error
			if errors.As(err, &te) && (te.Kind == fault.KindStale || te.Kind == fault.KindNotFound) {
				// Already resolved (a race with a person) or gone: the timer has nothing to do.
				if cerr := m.cfg.Store.CancelExpiry(m.base, e.ConversationID, e.ToolCallID); cerr != nil {
					m.cfg.Logger.Warn("cancel stale expiry", "conversation_id", e.ConversationID, "tool_call_id", e.ToolCallID, "err", cerr)
				}
			} else if err != nil && m.base.Err() == nil {
				m.cfg.Logger.Warn("fire expiry", "conversation_id", e.ConversationID, "tool_call_id", e.ToolCallID, "err", err)
			}
		}
		if len(due) < batch {
			return
		}
	}
}

// writeFailure is what a conversation's failed appends left for its next actor: how many in a
// row, and whether the last one was the model's answer.
type writeFailure struct {
	count  int
	answer bool
}

// reviveLater restarts a conversation whose actor stopped after a failed write, once the store
// had a moment to recover, so its turn continues from the log. Each failure in a row doubles
// the pause (backoff, up to RetryMax); the revived actor ends the turn once there were
// MaxWriteFailures (actor.run), so a write that keeps failing cannot loop for ever.
func (m *Manager) reviveLater(id string) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	f := m.failures[id]
	m.wg.Add(1)
	m.mu.Unlock()
	timer := m.cfg.Clock.NewTimer(m.backoff(f.count, 0))
	go func() {
		defer m.wg.Done()
		defer timer.Stop()
		select {
		case <-m.quit:
		case <-timer.C():
			_, _, _ = m.acquire(m.base, id, false)
		}
	}()
}

// noteFailure records a conversation's failed appends in a row (the latest note wins: a
// model answer's failure is noted after its append's).
func (m *Manager) noteFailure(id string, f writeFailure) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failures[id] = f
}

// takeFailures returns and clears the conversation's failed appends in a row (reviveLater).
func (m *Manager) takeFailures(id string) writeFailure {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.failures[id]
	delete(m.failures, id)
	return f
}

// backoff is the wait before attempt n+1 after n failures: exponential from RetryBase, capped
// at RetryMax, with equal jitter (half fixed, half random) so retries of many calls spread out.
// A Retry-After longer than that wins.
func (m *Manager) backoff(failures int, retryAfter time.Duration) time.Duration {
	d := m.cfg.RetryBase
	for i := 1; i < failures && d < m.cfg.RetryMax; i++ {
		d *= 2
	}
	if d > m.cfg.RetryMax {
		d = m.cfg.RetryMax
	}
	d = d/2 + rand.N(d/2+1)
	if retryAfter > d {
		d = retryAfter
	}
	return d
}

// internalError logs err with a reference and returns the internal tool error that carries only
// that reference.
func (m *Manager) internalError(what string, err error) *fault.Error {
	return fault.Internal(m.cfg.Logger, "agent: "+what, err)
}

// errClosed is returned once Close has begun.
func errClosed() *fault.Error {
	return fault.New(fault.KindServiceUnavailable, "the agent is shutting down", nil)
}

// errTakenOver answers a request whose write was refused because another process took the
// conversation over: nothing of it was written.
func errTakenOver() *fault.Error {
	return fault.New(fault.KindServiceUnavailable, "the conversation moved to another process before this request was written; try again", nil)
}

func errNotFound() *fault.Error {
	return fault.New(fault.KindNotFound, "no such conversation", nil)
}

func errStale(id string) *fault.Error {
	return fault.New(fault.KindStale, "the call is not awaiting an answer (unknown, expired or already resolved)", map[string]any{"tool_call_id": id})
}

// requestKey is a fresh key for a message or a resolve sent through the cluster (request.key).
func requestKey() string {
	var b [12]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
