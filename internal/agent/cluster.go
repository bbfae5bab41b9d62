package agent

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"parley/internal/fault"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/telemetry"
)

// This file is how Managers of several processes on one database share the conversations: at
// most one live actor per conversation in the whole cluster, on the process that owns it (its
// row in the database says which). A request that lands on any other process is forwarded to
// the owner and answered there, once its answer is durable, exactly as if it were local; a
// conversation nobody live owns is claimed by the process the request landed on. Events cross
// processes through the Events implementation (package cluster), not through this file.

// Cluster coordinates this process's Manager with the others on the same database. Package
// cluster implements it on PostgreSQL; a nil Cluster (the embedded store) is one process.
type Cluster interface {
	// Self is this process's node id.
	Self() string
	// Serve installs what this process answers to the others. The Manager calls it once, in
	// Start, before it claims anything.
	Serve(in Inbound)
	// Claim makes this process the conversation's owner unless a live process owns it, and
	// returns the owner's node id (Self when it is this process). A conversation that does not
	// exist is store.ErrNotFound.
	Claim(ctx context.Context, convID string) (owner string, err error)
	// Release gives up this process's ownership of the conversation (it is shutting down and
	// the conversation's actor stopped), so another process takes it over at once.
	Release(ctx context.Context, convID string) error
	// Owner returns the conversation's live owner, "" when it has none.
	Owner(ctx context.Context, convID string) (string, error)
	// Forward sends body to node and returns its reply (Inbound.Forward there). It gives up
	// with an error when ctx ends or the node does not answer within its own bound.
	Forward(ctx context.Context, node string, body []byte) ([]byte, error)
	// SetClients records this process's live page sockets of the conversation (0: none) and
	// rings the conversation's actor wherever it runs. Of two writes for one conversation, the
	// one with the higher version stands, whatever order they land in.
	SetClients(ctx context.Context, convID string, n int, version int64) error
	// RemoteClients counts the live page sockets of the conversation on the other live
	// processes.
	RemoteClients(ctx context.Context, convID string) (int, error)
	// Orphans lists active conversations (status not idle) whose owner is dead, up to limit;
	// full also lists those without any owner (after a process left), at the cost of reading
	// every active conversation.
	Orphans(ctx context.Context, limit int, full bool) ([]string, error)
	// ReleaseAllBut gives up this process's ownership of every conversation but keep (those
	// whose actors still run): a shutdown begins, and requests for the others should not wait
	// for it.
	ReleaseAllBut(ctx context.Context, keep []string) error
	// Ready is nil when this process may take writes: it is not fenced and hears the others.
	// Otherwise it is service_unavailable (the process is re-joining after losing the database).
	Ready() error
}

// Inbound is what a process answers to the others.
type Inbound struct {
	// Forward answers a request another process forwarded (Cluster.Forward there).
	Forward func(ctx context.Context, body []byte) []byte
	// Ring tells a conversation's actor, if it runs here, that its page sockets changed.
	Ring func(convID string)
	// Rescan looks for conversations without a live owner now: a process left (left is its
	// node id, forgotten as an owner at once; "" when not known).
	Rescan func(left string)
	// Fence stops every actor of this process at once: it may no longer own them (its
	// heartbeat could not be written in time, so others may have taken them over).
	Fence func()
	// Owned tells that node published an event of the conversation: its actor ran there a
	// moment ago. It is kept as an owner hint (never as the truth).
	Owned func(convID, node string)
}

// Cluster settings (Config): how often a process looks for conversations left without a live
// owner, how long a forwarded request may wait for its answer, and how many times a request
// may find its owner moved before it gives up.
const (
	DefaultOrphanScan     = 2 * time.Second
	DefaultForwardTimeout = 10 * time.Second
	maxHops               = 8
)

// wireRequest is a request forwarded to the conversation's owner.
type wireRequest struct {
	Conv   string         `json:"conv"`
	Kind   reqKind        `json:"kind"`
	By     Principal      `json:"by"`
	Text   string         `json:"text,omitempty"`
	CallID string         `json:"call_id,omitempty"`
	Res    wireResolution `json:"res"`
	// Deadline is when the sender stops waiting (Unix milliseconds): the owner does not take a
	// request past it, so a request that timed out was not done behind the sender's back.
	Deadline int64 `json:"deadline,omitempty"`
	// Trace is the caller's span as W3C trace context (telemetry.Carry), so the owner's work
	// continues the caller's trace; absent when tracing is off.
	Trace map[string]string `json:"trace,omitempty"`
	// Key is the message's key (request.key).
	Key string `json:"key,omitempty"`
}

// wireResolution is a Resolution as it crosses processes: the names of the API's resolve body,
// which processes of an earlier version send too.
type wireResolution struct {
	Decision string           `json:"decision,omitempty"`
	Args     json.RawMessage  `json:"args,omitempty"`
	Reason   string           `json:"reason,omitempty"`
	Remember *wireRemember    `json:"remember,omitempty"`
	Action   string           `json:"action,omitempty"`
	Content  json.RawMessage  `json:"content,omitempty"`
	Result   json.RawMessage  `json:"result,omitempty"`
	Error    *wireClientError `json:"error,omitempty"`
	// A card's fields, typed by the owner (answers.go). An empty map is not no map (a form
	// without fields answered), so they are not omitted when empty.
	ArgFields map[string]string `json:"arg_fields"`
	Answers   map[string]string `json:"answers"`
}

type wireRemember struct {
	Scope   string `json:"scope"`
	ForSecs int64  `json:"for_secs"`
	Args    string `json:"args,omitempty"`
}

type wireClientError struct {
	Message string `json:"message"`
}

func toWireResolution(r Resolution) wireResolution {
	w := wireResolution{Decision: r.Decision, Args: r.Args, Reason: r.Reason, Action: r.Action, Content: r.Content, Result: r.Result,
		ArgFields: r.ArgFields, Answers: r.Answers}
	if r.Remember != nil {
		w.Remember = &wireRemember{Scope: r.Remember.Scope, ForSecs: r.Remember.ForSecs, Args: r.Remember.Args}
	}
	if r.Error != nil {
		w.Error = &wireClientError{Message: r.Error.Message}
	}
	return w
}

func (w wireResolution) resolution() Resolution {
	r := Resolution{Decision: w.Decision, Args: w.Args, Reason: w.Reason, Action: w.Action, Content: w.Content, Result: w.Result,
		ArgFields: w.ArgFields, Answers: w.Answers}
	if w.Remember != nil {
		r.Remember = &Remember{Scope: w.Remember.Scope, ForSecs: w.Remember.ForSecs, Args: w.Remember.Args}
	}
	if w.Error != nil {
		r.Error = &ClientError{Message: w.Error.Message}
	}
	return r
}

// wireResponse is the owner's answer. Moved means the owner did not take the request (it no
// longer owns the conversation, or it is shutting down): the sender finds the owner again.
type wireResponse struct {
	Moved    bool       `json:"moved,omitempty"`
	Err      *wireError `json:"err,omitempty"`
	View     *View      `json:"view,omitempty"`
	Resolved *Resolved  `json:"resolved,omitempty"`
	Posted   Posted     `json:"posted"`
}

// wireError carries a coded error across processes with its problems. Any other error was
// already turned into an internal error with a reference by the owner, which logged it.
type wireError struct {
	Kind     fault.Kind      `json:"kind"`
	Message  string          `json:"message"`
	Details  map[string]any  `json:"details,omitempty"`
	Problems []fault.Problem `json:"problems,omitempty"`
}

func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	var fe *fault.Error
	if !errors.As(err, &fe) {
		fe = fault.New(fault.KindInternal, "internal error", nil)
	}
	return &wireError{Kind: fe.Kind, Message: fe.Message, Details: fe.Details, Problems: fe.Problems}
}

func (w *wireError) err() error {
	if w == nil {
		return nil
	}
	return &fault.Error{Kind: w.Kind, Message: w.Message, Details: w.Details, Problems: w.Problems}
}

// acquire returns the conversation's local actor, starting one when this process owns the
// conversation or may claim it; otherwise it returns the live owner's node id. A request that
// came from a person may go where a hint says (useHint); the orphan scan and requests other
// processes forwarded here always ask the database, so a stale hint never stops a takeover or
// bounces a request between processes.
func (m *Manager) acquire(ctx context.Context, id string, useHint bool) (*actor, string, error) {
	if a := m.live(id); a != nil || m.cluster == nil {
		if a != nil {
			return a, "", nil
		}
		a, err := m.ensureStarted(id)
		return a, "", err
	}
	if m.isClosed() {
		return nil, "", errClosed()
	}
	if owner := m.hint(id); useHint && owner != "" {
		return nil, owner, nil
	}
	owner, err := m.cluster.Claim(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, "", errNotFound()
	case fault.KindOf(err) == fault.KindServiceUnavailable:
		return nil, "", err // this process is re-joining the cluster after a fence
	case err != nil:
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		return nil, "", m.internalError("claim conversation", err)
	case owner != m.cluster.Self():
		m.setHint(id, owner)
		return nil, owner, nil
	}
	m.dropHint(id)
	a, err := m.ensureStarted(id)
	return a, "", err
}

// maxHints bounds the owner hints a process keeps; past it they are all dropped (each costs
// one claim to learn again).
const maxHints = 100_000

// hint returns the process that owned the conversation when this one last looked, "" when it
// does not know. A hint is never the truth: the process it names answers moved when it does not
// own the conversation (it checks its own registry and the database), and forward drops the
// hint then. It saves the claim's round trip on every request that lands on a non-owner.
func (m *Manager) hint(convID string) string {
	m.hintsMu.Lock()
	defer m.hintsMu.Unlock()
	h, ok := m.hints[convID]
	if !ok {
		return ""
	}
	if gen, gone := m.left[h.owner]; gone && h.gen <= gen {
		delete(m.hints, convID) // learned before its owner left
		return ""
	}
	return h.owner
}

// hintOf is an owner hint and when it was learned (Manager.hintGen).
type hintOf struct {
	owner string
	gen   uint64
}

func (m *Manager) setHint(convID, owner string) {
	m.hintsMu.Lock()
	defer m.hintsMu.Unlock()
	if len(m.hints) >= maxHints {
		clear(m.hints)
	}
	m.hintGen++
	m.hints[convID] = hintOf{owner: owner, gen: m.hintGen}
}

func (m *Manager) dropHint(convID string) {
	m.hintsMu.Lock()
	defer m.hintsMu.Unlock()
	delete(m.hints, convID)
}

// dropHintsOf voids every hint naming node learned until now (it left, or gave its
// conversations up): a request for one of its conversations claims it at once rather than
// waiting for a departed owner to answer. It costs the same however many hints there are (a
// process that shuts down says "left" once per conversation it releases); the void hints go as
// they are read. Past maxLeft departures remembered, they are forgotten together with every
// hint (each costs a claim to learn again), so no void hint comes back.
func (m *Manager) dropHintsOf(node string) {
	m.hintsMu.Lock()
	defer m.hintsMu.Unlock()
	if _, known := m.left[node]; !known && len(m.left) >= maxLeft {
		clear(m.left)
		clear(m.hints)
	}
	m.left[node] = m.hintGen
}

// maxLeft bounds the departed processes remembered (dropHintsOf).
const maxLeft = 1024

// forward sends req to the owner and returns its answer. moved reports that the owner did not
// take it, or died before it answered: the caller finds the owner again. A request the owner
// may have taken but did not answer in time is not sent again (a message would be posted
// twice): it fails with service_unavailable, its outcome unknown.
func (m *Manager) forward(ctx context.Context, owner, convID string, req *request) (resp response, moved bool, err error) {
	fctx, cancel := context.WithTimeout(ctx, m.cfg.ForwardTimeout)
	defer cancel()
	deadline, _ := fctx.Deadline()
	body, err := json.Marshal(wireRequest{Conv: convID, Kind: req.kind, By: req.by, Text: req.text, CallID: req.callID, Res: toWireResolution(req.res),
		Deadline: deadline.UnixMilli(), Trace: telemetry.Carry(req.origin.span), Key: req.key})
	if err != nil {
		return response{}, false, m.internalError("encode forwarded request", err)
	}
	out, err := m.cluster.Forward(fctx, owner, body)
	if err != nil {
		m.dropHint(convID)
		switch {
		case ctx.Err() != nil:
			metrics.ClusterForwards.WithLabelValues("failed").Inc()
			return response{}, false, ctx.Err()
		case errors.Is(err, ErrOwnerGone):
			// It stopped beating or left: its conversations are taken over, this one too.
			metrics.ClusterForwards.WithLabelValues("moved").Inc()
			return response{}, true, nil
		case fault.KindOf(err) == fault.KindServiceUnavailable:
			// Not sent (this process is re-joining the cluster): nothing took effect.
			return response{}, false, err
		}
		metrics.ClusterForwards.WithLabelValues("failed").Inc()
		m.cfg.Logger.Warn("forwarded request unanswered", "conversation_id", convID, "node", owner, "err", err)
		return response{}, false, fault.New(fault.KindServiceUnavailable,
			"the process that runs this conversation did not answer in time; reload to see whether the request took effect", nil)
	}
	var w wireResponse
	if err := json.Unmarshal(out, &w); err != nil {
		return response{}, false, m.internalError("decode forwarded answer", err)
	}
	if w.Moved {
		metrics.ClusterForwards.WithLabelValues("moved").Inc()
		m.dropHint(convID)
		return response{}, true, nil
	}
	metrics.ClusterForwards.WithLabelValues("answered").Inc()
	resp = response{err: w.Err.err(), resolved: w.Resolved, posted: w.Posted}
	if w.View != nil {
		resp.view = *w.View
	}
	return resp, false, resp.err
}

// ErrOwnerGone is what Cluster.Forward returns when the process it forwarded to stopped
// beating (or left) before it answered: the request was not taken, or its effect is in the log
// that the next owner continues from.
var ErrOwnerGone = errors.New("the owning process stopped before it answered")

// viewAtOwner asks the live owner elsewhere for the view; ok is false when there is none (or
// it is this process, or it did not take the request): the caller reads the store.
func (m *Manager) viewAtOwner(ctx context.Context, convID string, by Principal) (View, bool, error) {
	if m.cluster.Ready() != nil {
		return View{}, false, nil // re-joining: no answer could be heard; the store has the log
	}
	for try := 0; try < maxHops; try++ {
		owner, err := m.cluster.Owner(ctx, convID)
		if err != nil || owner == "" || owner == m.cluster.Self() {
			return View{}, false, nil
		}
		resp, moved, err := m.forward(ctx, owner, convID, &request{kind: reqView, by: by})
		if !moved {
			return resp.view, true, err
		}
		if err := m.pause(ctx, try+1); err != nil {
			return View{}, true, err
		}
	}
	return View{}, false, nil
}

// serveForward answers a request another process forwarded here, as the conversation's owner.
// It never forwards again: when this process does not own the conversation it answers moved.
// A request whose sender gave up already (its deadline passed while it waited) is not taken. A
// view of a conversation with no actor here is read from the store: a look does not revive it.
func (m *Manager) serveForward(ctx context.Context, body []byte) []byte {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return mustJSON(wireResponse{Err: toWire(m.internalError("decode forwarded request", err))})
	}
	if w.Deadline > 0 {
		deadline := time.UnixMilli(w.Deadline)
		if !m.cfg.Clock.Now().Before(deadline) {
			return mustJSON(wireResponse{Err: toWire(fault.New(fault.KindServiceUnavailable, "the request waited too long to be served", nil))})
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	by, err := m.forwardedPrincipal(ctx, w.Kind, w.By)
	if err != nil {
		return mustJSON(wireResponse{Err: toWire(err)})
	}
	w.By = by
	if w.Kind == reqView && m.live(w.Conv) == nil {
		v, err := m.viewFromStore(ctx, w.Conv, w.By)
		out := wireResponse{Err: toWire(err)}
		if err == nil {
			out.View = &v
		}
		return mustJSON(out)
	}
	req := &request{kind: w.Kind, by: w.By, text: w.Text, callID: w.CallID, res: w.Res.resolution(), key: w.Key, reply: make(chan response, 1),
		origin: origin{span: telemetry.Carried(w.Trace), at: m.cfg.Clock.Now()}}
	for range maxHops {
		a, owner, err := m.acquire(ctx, w.Conv, false)
		if owner != "" || fault.KindOf(err) == fault.KindServiceUnavailable {
			return mustJSON(wireResponse{Moved: true})
		}
		if err != nil {
			return mustJSON(wireResponse{Err: toWire(err)})
		}
		resp, retry, err := m.deliver(ctx, a, req)
		if retry {
			continue
		}
		out := wireResponse{Err: toWire(err), Resolved: resp.resolved, Posted: resp.posted}
		if w.Kind == reqView && err == nil {
			out.View = &resp.view
		}
		return mustJSON(out)
	}
	return mustJSON(wireResponse{Moved: true})
}

// forwardedPrincipal is who a forwarded request acts for, as this process's store has them.
// The sender authenticated the caller, but the owner decides with the user's role as it
// stands, not with the role the body names (stale, or sealed by whoever got hold of the
// cluster's key): a user the store does not have decides nothing, and the app's own principal
// comes only with what the app itself sends as System (expiries).
func (m *Manager) forwardedPrincipal(ctx context.Context, kind reqKind, by Principal) (Principal, error) {
	if by.system() || by.UserID == System.UserID {
		if kind == reqExpire && by == System {
			return System, nil
		}
		return Principal{}, permissionDenied("a forwarded request acts for a person, not the system")
	}
	if by.UserID == "" {
		return Principal{}, permissionDenied("a forwarded request names no user")
	}
	u, err := m.cfg.Store.UserByID(ctx, by.UserID)
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, permissionDenied("the account that sent this request no longer exists")
	}
	if err != nil {
		return Principal{}, m.internalError("read the user of a forwarded request", err)
	}
	return Principal{UserID: u.ID, Role: u.Role, Via: by.Via}, nil
}

// pause waits a moment before a request looks for its owner again (the owner was shutting
// down or moving the conversation): 10 ms, growing with each try.
func (m *Manager) pause(ctx context.Context, try int) error {
	t := m.cfg.Clock.NewTimer(time.Duration(try) * 10 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// scanOrphans takes over the active conversations that have no live owner (their process died
// or left): each is claimed and its actor continues the turn from the log. It runs every
// OrphanScan and at once when a process leaves.
//
// The periodic scan looks only at conversations whose owner is dead (an index lookup per dead
// process: nothing when every process lives); the first scan, a rescan (a process left) and
// every fullScanEvery-th one also look for active conversations without any owner.
func (m *Manager) scanOrphans(rescan <-chan struct{}) {
	defer m.wg.Done()
	const fullScanEvery = 15
	timer := m.cfg.Clock.NewTimer(0)
	defer timer.Stop()
	for i := 0; ; i++ {
		full := i%fullScanEvery == 0
		select {
		case <-m.quit:
			return
		case <-timer.C():
		case <-rescan:
			full = true
		}
		m.adoptOrphans(full)
		timer.Reset(m.cfg.OrphanScan)
	}
}

func (m *Manager) adoptOrphans(full bool) {
	const batch = 100
	ids, err := m.cluster.Orphans(m.base, batch, full)
	if err != nil {
		if m.base.Err() == nil {
			m.cfg.Logger.Error("agent: list conversations without an owner", "err", err)
		}
		return
	}
	for _, id := range ids {
		a, _, err := m.acquire(m.base, id, false)
		if err != nil && m.base.Err() == nil && fault.KindOf(err) != fault.KindNotFound {
			m.cfg.Logger.Warn("agent: take over conversation", "conversation_id", id, "err", err)
		}
		if a != nil {
			metrics.ClusterTakeovers.Inc()
			m.cfg.Logger.Info("agent: took over a conversation without a live owner", "conversation_id", id)
		}
	}
}

// released hands the conversation over once its actor stopped during a shutdown: the next
// request, or the others' scan, finds it without an owner instead of waiting for this
// process's heartbeat to go stale. Outside a shutdown the process keeps its conversations.
func (m *Manager) released(a *actor) {
	if m.cluster == nil || !m.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.base), 2*time.Second)
	defer cancel()
	if err := m.cluster.Release(ctx, a.id); err != nil {
		a.log.Warn("agent: hand the conversation over", "err", err)
	}
}

// releaseIdle hands over, as a shutdown begins, every conversation this process owns but runs
// no actor for (hibernated ones): requests for them go elsewhere at once instead of bouncing
// here until the process leaves. Those with actors are handed over as each stops (released).
func (m *Manager) releaseIdle(ctx context.Context) {
	m.mu.Lock()
	keep := make([]string, 0, len(m.actors))
	for id := range m.actors {
		keep = append(keep, id)
	}
	m.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := m.cluster.ReleaseAllBut(rctx, keep); err != nil {
		m.cfg.Logger.Warn("agent: hand over the conversations without an actor", "err", err)
	}
}

// fence stops every local actor at once (hard): this process may no longer own them.
func (m *Manager) fence() {
	m.mu.Lock()
	actors := make([]*actor, 0, len(m.actors))
	for _, a := range m.actors {
		actors = append(actors, a)
	}
	m.mu.Unlock()
	if len(actors) > 0 {
		m.cfg.Logger.Error("agent: lost the cluster heartbeat; stopping every conversation of this process", "actors", len(actors))
	}
	for _, a := range actors {
		a.evictNow()
	}
}

// ringLocal rings the conversation's actor when it runs here.
func (m *Manager) ringLocal(convID string) { ring(m.live(convID)) }
