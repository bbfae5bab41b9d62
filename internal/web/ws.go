package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/tools"
	"parley/views"
)

// Socket tuning. The send queue is per connection; see socket.enqueue for the overflow policy.
const (
	sendQueueSize = 64
	writeTimeout  = 5 * time.Second
	pingInterval  = 25 * time.Second
	// deltaFlush is the shortest gap between two renders of the streaming text: a delta after a
	// quiet spell is rendered at once, later ones are gathered until the gap has passed, so a
	// fast model costs at most ~20 renders a second per conversation (one render serves all its
	// pages: stream.go) instead of one per token.
	deltaFlush = 50 * time.Millisecond
	// streamUnit is how much streamed text one deltaFlush pays for. Each render is the whole
	// text so far (Markdown is not incremental: a later line can turn earlier ones into a table or
	// a list), so past streamUnit bytes the gap grows with the text (streamGap): the Markdown
	// rendered per conversation, and sent per page, stays under streamUnit per deltaFlush
	// (~160 KB/s) however long the answer, and the render of a long answer is not quadratic in
	// its deltas.
	streamUnit = 8 << 10
	// maxClientFrame bounds what a page may send (a client tool's result).
	maxClientFrame = 256 << 10
)

// Counters of socket events worth watching.
var (
	// SocketOverflows counts sockets closed because their send queue was full.
	SocketOverflows atomic.Int64
	// SocketsOpen is the number of live page sockets.
	SocketsOpen atomic.Int64
)

// frame is a server → page message. HTML frames carry fragments rendered by the same templ
// components as the page; hooks.js applies them by element id (see static/js/hooks.js).
type frame struct {
	Type       string          `json:"type"`
	Op         string          `json:"op,omitempty"`
	Target     string          `json:"target,omitempty"`
	Parent     string          `json:"parent,omitempty"`
	Rev        string          `json:"rev,omitempty"`
	HTML       *string         `json:"html,omitempty"`
	Text       string          `json:"text,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Tool       string          `json:"tool,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	Ask        bool            `json:"ask,omitempty"` // client_exec: ask the person before running the tool
	OK         *bool           `json:"ok,omitempty"`
	Kind       string          `json:"kind,omitempty"`
	Message    string          `json:"message,omitempty"`
	Count      *int            `json:"count,omitempty"` // count: the approvals waiting in the viewer's inbox
	// Requester, with Tool, names the newest approval on a count frame that grew: all a
	// browser notification says.
	Requester string `json:"requester,omitempty"`
}

// clientFrame is a page → server message.
type clientFrame struct {
	Type       string           `json:"type"`
	ToolCallID string           `json:"tool_call_id"`
	Result     json.RawMessage  `json:"result"`
	Error      *clientErrorJSON `json:"error"`
}

// socket is one page's WebSocket. An idle socket keeps two goroutines: the one running serve
// and pump (the only one that reads agent events and renders, and the owner of the keepalive
// timer) and readLoop, the only reader (coder/websocket's Read blocks). A writer runs only while
// frames or a ping wait: enqueue starts one, and it ends when the queue is empty, so there is at
// most one writer at a time and frames leave in order. serve returns only after the reader and
// any writer stopped.
type socket struct {
	s      *Server
	conn   *websocket.Conn
	log    *slog.Logger
	cancel context.CancelFunc
	ping   clock.Timer // keepalive, set by begin; the pump's runLive selects on keepalive()

	mu       sync.Mutex
	queue    [][]byte        // frames waiting for the writer, oldest first; nil when empty (guarded by mu)
	pingDue  bool            // a ping waits for the writer (guarded by mu)
	writing  bool            // a writer goroutine owns the queue (guarded by mu)
	wctx     context.Context // the socket's context once serve runs; nil before, so no writer starts (guarded by mu)
	writeErr error           // the write that failed, which ends the socket (guarded by mu)
	writers  sync.WaitGroup  // the writer, while one runs

	// The reader (set by begin, read by end after readDone closed).
	cancelRead context.CancelFunc
	readDone   chan struct{}
	readErr    error

	closeOnce   sync.Once
	closeCode   websocket.StatusCode
	closeReason string
}

func newSocket(s *Server, conn *websocket.Conn, log *slog.Logger, cancel context.CancelFunc) *socket {
	return &socket{s: s, conn: conn, log: log, cancel: cancel, closeCode: websocket.StatusNormalClosure}
}

// finish records why the socket ends (the first reason wins) and stops its goroutines.
func (k *socket) finish(code websocket.StatusCode, reason string) {
	k.closeOnce.Do(func() {
		k.closeCode, k.closeReason = code, reason
	})
	k.cancel()
}

// enqueue hands a frame to the writer. Overflow policy: the queue (at most sendQueueSize frames,
// its room allocated as frames arrive and released when it empties) never blocks the pump and
// never drops a frame silently; when it is full the page is too slow to follow, so the socket is
// closed with StatusPolicyViolation and the page reconnects and resyncs from a fresh render.
func (k *socket) enqueue(f frame) bool {
	b, err := json.Marshal(f)
	if err != nil {
		k.log.Error("encode socket frame", "err", err)
		return false
	}
	k.mu.Lock()
	if len(k.queue) >= sendQueueSize {
		k.mu.Unlock()
		SocketOverflows.Add(1)
		k.log.Warn("socket send queue full; closing so the page resyncs", "queue", sendQueueSize)
		k.finish(websocket.StatusPolicyViolation, "send queue overflow; resync")
		return false
	}
	k.queue = append(k.queue, b)
	k.startWriterLocked()
	k.mu.Unlock()
	return true
}

// keepalive is the ping timer's channel; the pump's runLive calls heartbeat when it fires.
func (k *socket) keepalive() <-chan time.Time { return k.ping.C() }

// heartbeat asks the writer for a ping (one at most waits; it does not count against the
// queue) and sets the next one. A ping that gets no pong within writeTimeout ends the socket.
func (k *socket) heartbeat() bool {
	k.mu.Lock()
	k.pingDue = true
	k.startWriterLocked()
	k.mu.Unlock()
	k.ping.Reset(pingInterval)
	return true
}

// ending closes the socket for why runLive ends it: a policy violation when the viewer was
// signed out or lost the right, going away when the server stops.
func (k *socket) ending(why liveEnd) {
	switch why {
	case liveSignedOut:
		k.finish(websocket.StatusPolicyViolation, "signed out or no longer allowed")
	case liveShutdown:
		k.finish(websocket.StatusGoingAway, "server shutting down")
	}
}

// startWriterLocked starts a writer when there is work, none runs, serve is running and the
// socket is not ending.
func (k *socket) startWriterLocked() {
	if k.writing || k.wctx == nil || k.wctx.Err() != nil || k.writeErr != nil {
		return
	}
	k.writing = true
	k.writers.Add(1)
	go k.write(k.wctx)
}

// write delivers queued frames and a due ping, each with a timeout, until none waits; then it
// ends and the next enqueue starts another. It stops between writes when ctx ends; a write under
// way is not cancelled with it (it is bounded by writeTimeout): a cancelled write tears the
// connection down, and the close that follows would lose the status that tells the page why.
func (k *socket) write(ctx context.Context) {
	defer k.writers.Done()
	wbase := context.WithoutCancel(ctx)
	for {
		k.mu.Lock()
		if ctx.Err() != nil || (!k.pingDue && len(k.queue) == 0) {
			k.writing = false
			if len(k.queue) == 0 {
				k.queue = nil // an idle socket keeps no queue
			}
			k.mu.Unlock()
			return
		}
		var b []byte
		ping := k.pingDue
		if ping {
			k.pingDue = false
		} else {
			b = k.queue[0]
			k.queue[0] = nil
			k.queue = k.queue[1:]
		}
		k.mu.Unlock()
		wctx, cancel := context.WithTimeout(wbase, writeTimeout)
		var err error
		if ping {
			err = k.conn.Ping(wctx)
		} else {
			err = k.conn.Write(wctx, websocket.MessageText, b)
		}
		cancel()
		if err != nil {
			k.mu.Lock()
			k.writing, k.writeErr = false, err
			k.mu.Unlock()
			k.finish(websocket.StatusInternalError, "write failed")
			return
		}
	}
}

// start serves the socket on a goroutine of its own and returns: the request's goroutine, whose
// stack the upgrade's middleware and render left deep, ends with the handler (net/http lets a
// hijacked connection outlive it), and with it the request and its echo context. done runs when
// the socket has ended (the connection cap's release, the live guard's leave).
func (k *socket) start(ctx context.Context, readLoop func(context.Context) error, pump func(context.Context), done ...func()) {
	go func() {
		defer func() {
			for _, f := range done {
				f()
			}
		}()
		k.serve(ctx, readLoop, pump)
	}()
}

// serve runs the socket: readLoop in its goroutine, pump in this one, a writer while frames
// wait; when any ends, the others are stopped, the connection is closed with the recorded
// status, and serve returns after the reader and the writer did. A panic in pump closes the
// socket with StatusInternalError and is logged (no middleware recovers this goroutine).
//
// The setup and the ending are methods of their own so that while the pump waits, idle, the
// frames under it are small: a goroutine's stack shrinks (at a GC) only to four times what it
// uses, and the pump's grew during the connect render.
func (k *socket) serve(ctx context.Context, readLoop func(context.Context) error, pump func(context.Context)) {
	SocketsOpen.Add(1)
	defer SocketsOpen.Add(-1)
	k.begin(ctx, readLoop)
	k.runPump(ctx, pump)
	k.end()
}

// begin sets the keepalive, lets writers start and starts the reader.
func (k *socket) begin(ctx context.Context, readLoop func(context.Context) error) {
	k.ping = k.s.clock.NewTimer(pingInterval)
	k.mu.Lock()
	k.wctx = ctx
	if len(k.queue) > 0 {
		k.startWriterLocked()
	}
	k.mu.Unlock()
	// The reader gets its own context, cancelled only after Close: cancelling a Read tears the
	// connection down without the close handshake that tells the page why.
	readCtx, cancelRead := context.WithCancel(context.WithoutCancel(ctx))
	k.cancelRead = cancelRead
	k.readDone = make(chan struct{})
	go func() {
		defer close(k.readDone)
		k.readErr = readLoop(readCtx)
		k.finish(websocket.StatusNormalClosure, "")
	}()
}

// read reads the page's next message. The read itself gets a context that never ends: on one
// that can, coder/websocket registers a context.AfterFunc for every Read (with the context's
// done channel and its children's map, ~0.5 KiB an idle socket keeps). The reader ends all the
// same: end closes the connection (Close always does, after the handshake or its timeouts), and
// only then cancels ctx, which bounds what the reader does with a message (a Resolve).
func (k *socket) read(ctx context.Context) (websocket.MessageType, []byte, error) {
	return k.conn.Read(context.WithoutCancel(ctx))
}

// runPump runs pump until it returns or panics.
func (k *socket) runPump(ctx context.Context, pump func(context.Context)) {
	defer func() {
		if r := recover(); r != nil {
			k.log.Error("socket: panic", "panic", r, "stack", string(debug.Stack()))
			k.finish(websocket.StatusInternalError, "internal error")
		}
	}()
	pump(ctx)
}

// end stops the socket once the pump returned: it closes the connection with the recorded
// status and waits for the reader and the writer.
func (k *socket) end() {
	k.ping.Stop()
	k.cancel()
	k.closeOnce.Do(func() {})
	// No writer starts once ctx ended and one running stops between writes; Close waits for a
	// write under way, and ends a ping waiting for its pong.
	closeErr := k.conn.Close(k.closeCode, k.closeReason)
	k.cancelRead()
	<-k.readDone
	k.writers.Wait()
	k.mu.Lock()
	writeErr := k.writeErr
	k.mu.Unlock()
	for _, err := range []error{k.readErr, writeErr} {
		if err != nil && !normalClose(err) {
			k.log.Warn("socket ended with an error", "err", err, "status", k.closeCode.String())
			return
		}
	}
	// Close fails whenever the page closed first; that is no news.
	k.log.Debug("socket closed", "status", k.closeCode.String(), "close_err", closeErr)
}

// normalClose reports whether err is how sockets usually end: the page went away or closed
// it, the server closed it (for a reason already logged, such as an overflow), or the request
// ended.
func normalClose(err error) bool {
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway, websocket.StatusNoStatusRcvd, websocket.StatusPolicyViolation:
		return true
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}

// accept upgrades the request. The Origin must be this host's (coder/websocket's default check):
// a page on another site cannot open a socket with the user's cookie. Programs that send no
// Origin (Bearer clients) are accepted.
func accept(c echo.Context) (*websocket.Conn, error) {
	return websocket.Accept(smallBuffers{c.Response()}, c.Request(), &websocket.AcceptOptions{})
}

// The buffers a socket's connection keeps for its whole life (coder/websocket reads and writes
// through the hijacked bufio.Reader and bufio.Writer). net/http hands over 4 KiB of each, ~8 KiB
// per idle socket; a socket reads little (pongs, a client tool's result, which bufio reads past
// the buffer when it is larger) and most frames it writes are a few hundred bytes, so these are
// enough: a longer frame is written in two writes (the buffer, then the rest directly).
const (
	socketReadBuffer  = 512
	socketWriteBuffer = 1 << 10
)

// smallBuffers is the upgrade's ResponseWriter: its Hijack hands coder/websocket the connection
// with buffers of socketReadBuffer and socketWriteBuffer instead of net/http's, which are then
// dropped with the request. Bytes the client sent past the request, already read into net/http's
// buffer, start the new one.
type smallBuffers struct{ http.ResponseWriter }

// Unwrap lets http.ResponseController reach the writer underneath.
func (w smallBuffers) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack implements http.Hijacker.
func (w smallBuffers) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, fmt.Errorf("hijack: %w", err)
	}
	n := brw.Reader.Buffered()
	if n == 0 {
		return conn, bufio.NewReadWriter(bufio.NewReaderSize(conn, socketReadBuffer), bufio.NewWriterSize(conn, socketWriteBuffer)), nil
	}
	early, _ := brw.Reader.Peek(n) // cannot fail: n bytes are buffered
	r := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(early)), conn), max(n, socketReadBuffer))
	if _, err := r.Peek(n); err != nil { // into the buffer, where coder/websocket looks for them
		_ = conn.Close()
		return nil, nil, fmt.Errorf("hijack: keep the bytes read early: %w", err)
	}
	return conn, bufio.NewReadWriter(r, bufio.NewWriterSize(conn, socketWriteBuffer)), nil
}

// conversationSocket: GET /conversations/{id}/ws. Whoever may see the page may follow it (404
// for anyone else, like the page); only the owner's sockets run client tools (agent.MayAnswer),
// whose results are the owner's to give.
func (s *Server) conversationSocket(c echo.Context) error {
	id := c.Param("id")
	by := principal(c)
	v, err := s.agent.View(c.Request().Context(), id, by)
	if err != nil {
		return err
	}
	page := s.pageFor(c, v.ID, v.OwnerID, v.Calls) // before the upgrade: it may set the CSRF cookie
	release, err := s.openConn(by.UserID)
	if err != nil {
		return err
	}
	guard := s.newLiveGuard(c, id, v.OwnerID)
	conn, err := accept(c)
	if err != nil {
		guard.leave()
		release()
		return nil // Accept answered the request itself (403 for a foreign Origin)
	}
	conn.SetReadLimit(maxClientFrame)
	// The socket outlives this handler (socket.start): its context keeps the request's values,
	// not its end.
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.Request().Context()))
	k := newSocket(s, conn, s.log.With("conversation", id, "user", by.UserID), cancel)
	cs := &convSocket{socket: k, id: id, by: by, page: page, revs: map[string]string{}, guard: guard}
	k.start(ctx, cs.readLoop, cs.pump, cancel, guard.leave, release)
	return nil
}

// convSocket is the state of one conversation socket, owned by pump (revs, streaming text).
type convSocket struct {
	*socket
	id    string
	by    agent.Principal // who opened it; client results are resolved as them
	page  views.Page      // its Viewer follows the guard's re-checks (a changed role)
	guard *liveGuard

	revs       map[string]string // element id → data-rev last sent
	status     string            // status line HTML last sent
	clientSent map[string]bool   // client_exec frames sent on this socket

	sub    *agent.Subscription // the conversation's events, subscribed again after a resync
	detach func()              // ends the socket's attachment as a client (the owner's sockets)
	resync bool                // the subscription lagged: subscribe again when it closes

	// The streaming answer (stream.go): the conversation's shared stream renders it for every
	// socket of this process; the socket sends its page the renders that move it on.
	shared   *streamMember
	flush    <-chan time.Time // the socket's render window: when it ends, the text waiting is rendered; nil when none waits
	shownSeq int64            // the answer the page's streaming area shows (0: it is empty)
	shownN   int              // how many bytes of its text
	fedSeq   int64            // the newest answer this socket's own events (or view) told of
	over     int64            // answers before this seq are over: their renders are not shown
}

// pump follows the conversation's events and keeps the page current (runLive) until ctx ends,
// the server stops, or the subscription ends for good.
func (cs *convSocket) pump(ctx context.Context) {
	defer cs.leave()
	if !cs.join(ctx) {
		return
	}
	runLive[agent.Event](ctx, cs.guard, cs.log, cs)
}

var _ liveSink[agent.Event] = (*convSocket)(nil)

// updates is the conversation's events, of the subscription taken last.
func (cs *convSocket) updates() <-chan agent.Event { return cs.sub.C }

// due is the socket's render window: when it ends, the text waiting is rendered.
func (cs *convSocket) due() <-chan time.Time { return cs.flush }

func (cs *convSocket) fire(ctx context.Context) bool {
	cs.flush = nil
	cs.flushText(ctx, false)
	return true
}

// reauthorized: a changed role shows in the cards the socket renders next.
func (cs *convSocket) reauthorized(_ context.Context, by agent.Principal) bool {
	cs.page.Viewer.Principal = by
	return true
}

// join subscribes to the conversation's events, attaches the socket as a client of its
// owner's calls when it is the owner's, and syncs the page; false ends the socket. leave undoes
// what join did.
func (cs *convSocket) join(ctx context.Context) bool {
	sub, err := cs.s.agent.Subscribe(ctx, cs.id, cs.by)
	if err != nil {
		cs.finish(websocket.StatusPolicyViolation, "the conversation cannot be followed")
		return false
	}
	cs.sub = sub
	if agent.MayAnswer(cs.by, sub.OwnerID) {
		cs.detach = cs.s.agent.AttachClient(cs.id)
	}
	cs.clientSent = map[string]bool{}
	cs.shared = cs.s.streams.join(cs.id)
	return cs.sync(ctx, true)
}

// leave stops what join started.
func (cs *convSocket) leave() {
	if cs.shared != nil {
		cs.s.streams.leave(cs.id, cs.shared)
	}
	if cs.detach != nil {
		cs.detach()
	}
	if cs.sub != nil {
		cs.sub.Close()
	}
}

// update takes ev from the subscription (ok false: its channel closed) and whatever else is
// already queued, and brings the page up to date; false ends the socket.
func (cs *convSocket) update(ctx context.Context, ev agent.Event, ok bool) bool {
	s := cs.s
	if !ok {
		if !cs.resync {
			cs.finish(websocket.StatusGoingAway, "conversation closed")
			return false
		}
		// We lagged behind the agent's events: subscribe again and catch up as a page that
		// just connected would (deltas were lost, so the streaming area is replaced too).
		cs.resync = false
		sub, err := s.agent.Subscribe(ctx, cs.id, cs.by)
		if err != nil {
			cs.finish(websocket.StatusPolicyViolation, "the conversation cannot be followed")
			return false
		}
		cs.sub = sub
		cs.flush = nil
		return cs.sync(ctx, true)
	}
	dirty := false
	for {
		if err := cs.guard.mayStillFollow(ctx, ev); err != nil {
			// A decider's right to read ended (their decision, or another's).
			cs.finish(websocket.StatusPolicyViolation, "signed out or no longer allowed")
			return false
		}
		switch ev.Type {
		case agent.EventTextDelta:
			// Leading edge: a delta after a quiet spell is rendered at once; the ones that
			// follow within the gap are gathered and rendered together when it ends. What
			// the page already has (the text the connect's view held) is skipped.
			cs.fedSeq = max(cs.fedSeq, ev.Seq)
			if cs.shared.feed(ev) {
				cs.reseed(ctx)
			}
			if cs.flush == nil {
				cs.flushText(ctx, false)
			}
		case agent.EventResync:
			cs.resync = true
		case agent.EventClientExec:
			cs.flushText(ctx, true)
			cs.clientExec(ev)
		default:
			cs.flushText(ctx, true)
			dirty = true
		}
		// Take whatever else is already queued before rendering: a burst of events
		// costs one View and one diff.
		select {
		case ev, ok = <-cs.sub.C:
			if ok {
				continue
			}
		default:
		}
		break
	}
	// A channel closed during the drain yields !ok again in runLive's next select.
	return !dirty || cs.sync(ctx, false)
}

// streamGap is the shortest gap between two renders of n bytes of streamed text: deltaFlush,
// and one more deltaFlush for every further streamUnit, so a long answer is rendered less often
// (at 80 KiB, every half second) and the work per second stays bounded.
func streamGap(n int) time.Duration {
	return deltaFlush * time.Duration(1+n/streamUnit)
}

// flushText has the conversation's streaming text rendered when its window has passed (at once
// with force: an event that must follow the text on the page), else arms the socket's window,
// and sends the page the latest render when it moves the page on. One render serves every
// socket of the conversation: the first to ask renders (views.Streaming: Markdown, sanitized,
// as the logged message will be), the others find it done.
func (cs *convSocket) flushText(ctx context.Context, force bool) {
	wait, err := cs.shared.tick(ctx, cs.s.clock.Now(), force)
	if err != nil {
		if ctx.Err() == nil {
			cs.log.Error("socket: render the streaming text", "err", err)
		}
		return
	}
	if wait > 0 && cs.flush == nil {
		cs.flush = cs.s.clock.After(wait)
	}
	cs.showLatest()
}

// showLatest sends the page the shared stream's latest render when it shows more than the page
// has: of the answer the page shows, or of a newer one this socket's events told of (a render
// of an answer still ahead of its events would show before the message of the one before),
// never of one that is over.
func (cs *convSocket) showLatest() {
	r := cs.shared.latest()
	if r.seq == 0 || r.seq < cs.over || r.seq > cs.fedSeq || r.seq < cs.shownSeq || (r.seq == cs.shownSeq && r.n <= cs.shownN) {
		return
	}
	h := r.html
	if cs.enqueue(frame{Type: "html", Op: "replace", Target: "streaming", HTML: &h}) {
		cs.shownSeq, cs.shownN = r.seq, r.n
	}
}

// reseed gives the shared stream the text so far from a view, when a delta could not be placed
// (text was missed: another process's delivery, a call tried again).
func (cs *convSocket) reseed(ctx context.Context) {
	v, err := cs.s.agent.View(ctx, cs.id, cs.by)
	if err != nil {
		if ctx.Err() == nil {
			cs.log.Warn("socket: load view for the streaming text", "err", err)
		}
		return
	}
	cs.shared.seed(v.StreamSeq, v.Streaming)
}

// sync renders the view and sends what the page may not have: every item whose data-rev it has
// not been sent (on connect: every item — the page skips the ones it already shows), the status
// line when it changed, the streaming area when a message replaced it, and on connect the
// pending client calls again.
func (cs *convSocket) sync(ctx context.Context, connect bool) bool {
	v, err := cs.s.agent.View(ctx, cs.id, cs.by)
	if err != nil {
		switch {
		case ctx.Err() != nil:
		case ended(err):
			// A decider's right to read ended (their decision, or another's).
			cs.finish(websocket.StatusPolicyViolation, "signed out or no longer allowed")
		default:
			cs.log.Warn("socket: load view", "err", err)
			cs.finish(websocket.StatusInternalError, "could not load the conversation")
		}
		return false
	}
	cs.s.addNames(ctx, cs.page.Names, v.Calls)
	for _, it := range views.Items(v) {
		html, rev, err := views.ItemHTML(ctx, cs.page, it)
		if err != nil {
			cs.log.Error("socket: render item", "err", err)
			continue
		}
		id := it.DOMID()
		if cs.revs[id] == rev {
			continue
		}
		cs.revs[id] = rev
		h := string(html)
		if !cs.enqueue(frame{Type: "html", Op: "upsert", Target: id, Parent: "timeline", Rev: rev, HTML: &h}) {
			return false
		}
	}
	var st bytes.Buffer
	if err := views.StatusLine(cs.page, v).Render(ctx, &st); err == nil && st.String() != cs.status {
		cs.status = st.String()
		h := cs.status
		cs.enqueue(frame{Type: "html", Op: "replace", Target: "status", HTML: &h})
	}
	// Answers before the one streaming (or, when none does, before the last entry: the next
	// one starts after it) are over.
	cs.over = v.StreamSeq
	if cs.over == 0 {
		cs.over = v.LastSeq
	}
	cs.shared.forget(cs.over)
	switch {
	case connect:
		// The page gets the text so far, and the deltas that follow add to it: those the view
		// already held are skipped (their offsets fall within it).
		cs.shared.seed(v.StreamSeq, v.Streaming)
		cs.fedSeq = max(cs.fedSeq, v.StreamSeq)
		if !cs.showStreaming(ctx, v.StreamSeq, v.Streaming) {
			return false
		}
	case cs.shownN > 0 && (v.Streaming == "" || v.StreamSeq != cs.shownSeq):
		// The answer shown is logged (or ended): the area empties; a newer one comes with its
		// renders.
		if !cs.showStreaming(ctx, 0, "") {
			return false
		}
		cs.showLatest()
	}
	if connect {
		for _, c := range v.Calls {
			if c.Awaiting() && c.PendingKind == tools.PendingClientExec {
				cs.clientExec(agent.Event{Type: agent.EventClientExec, ToolCallID: c.ID, Call: &c})
			}
		}
	}
	return true
}

// showStreaming replaces the page's streaming area with text, rendered for this page alone (a
// connect, or the area emptied).
func (cs *convSocket) showStreaming(ctx context.Context, seq int64, text string) bool {
	var b bytes.Buffer
	if err := views.Streaming(text).Render(ctx, &b); err != nil {
		cs.log.Error("socket: render the streaming text", "err", err)
		return true
	}
	h := b.String()
	if !cs.enqueue(frame{Type: "html", Op: "replace", Target: "streaming", HTML: &h}) {
		return false
	}
	cs.shownSeq, cs.shownN = seq, len(text)
	return true
}

// clientExec asks the page to run a client tool: the owner's pages only. A browser tool runs
// in the browser of the person whose conversation it is; a reviewer or an admin following it
// must never run it (their result would be refused, but their browser would have acted).
func (cs *convSocket) clientExec(ev agent.Event) {
	if cs.guard.borrowed() {
		return
	}
	if ev.Call == nil {
		cs.log.Error("socket: client_exec event without its call", "tool_call_id", ev.ToolCallID)
		return
	}
	cs.clientSent[ev.ToolCallID] = true
	cs.enqueue(frame{Type: "client_exec", ToolCallID: ev.ToolCallID, Tool: ev.Call.Name, Args: rawOr(ev.Call.Args, "{}"), Ask: ev.Call.AskFirst})
}

// readLoop takes the page's frames: client tool results and errors, into Resolve as the owner.
func (cs *convSocket) readLoop(ctx context.Context) error {
	for {
		typ, data, err := cs.read(ctx)
		if err != nil {
			return err
		}
		if typ != websocket.MessageText {
			cs.finish(websocket.StatusUnsupportedData, "text frames only")
			return nil
		}
		var f clientFrame
		if err := json.Unmarshal(data, &f); err != nil || f.Type != "resolve" || f.ToolCallID == "" {
			cs.enqueue(frame{Type: "resolved", ToolCallID: f.ToolCallID, OK: new(false), Kind: string(fault.KindBadRequest),
				Message: `expected {"type":"resolve","tool_call_id":…,"result"|"error":…}`})
			continue
		}
		if (len(f.Result) == 0) == (f.Error == nil) {
			cs.enqueue(frame{Type: "resolved", ToolCallID: f.ToolCallID, OK: new(false), Kind: string(fault.KindInvalidArgs),
				Message: "send either a result or an error"})
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = cs.s.agent.Resolve(rctx, cs.id, f.ToolCallID, agent.Resolution{Result: f.Result, Error: f.Error.clientError()}, cs.by)
		cancel()
		ans := frame{Type: "resolved", ToolCallID: f.ToolCallID, OK: new(err == nil)}
		if err != nil {
			var te *fault.Error
			if errors.As(err, &te) && te.Kind != fault.KindInternal {
				ans.Kind, ans.Message = string(te.Kind), te.Message
			} else {
				cs.log.Error("socket: resolve client call", "call", f.ToolCallID, "err", err)
				ans.Kind, ans.Message = string(fault.KindInternal), "internal error"
			}
		}
		cs.enqueue(ans)
	}
}

func rawOr(raw json.RawMessage, def string) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage(def)
	}
	return raw
}
