package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/internal/metrics"
)

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
	if err := n.Ready(); err != nil {
		// The reply would come on a listener that is not listening (or that another process
		// may have replaced as the conversation's owner's peer): refuse now rather than wait
		// out the forward's bound for an answer that cannot be heard.
		return nil, err
	}
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
