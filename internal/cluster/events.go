package cluster

import (
	"context"
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"parley/internal/agent"
	"parley/internal/metrics"
	"parley/internal/store"
)

// wireEvent is an event as it crosses processes: with the log entries it carries, which the
// agent's Event leaves out of its JSON.
type wireEvent struct {
	agent.Event
	Entries []store.Entry `json:"entries,omitempty"`
}

// Publish implements agent.Events: the local subscribers get e at once; the other processes'
// get it from the sender, which never makes Publish wait. When the send queue is full the event
// is dropped and the other processes' subscribers of its conversation get resync instead.
func (n *Node) Publish(e agent.Event) {
	n.hub.Publish(e)
	if n.peers.Load() == 0 {
		return
	}
	select {
	case n.out <- e:
		n.queued.Add(1)
	default:
		n.dropMu.Lock()
		if len(n.dropped) < maxDropped {
			n.dropped[e.ConversationID] = true
		} else {
			n.dropAll = true
		}
		n.dropMu.Unlock()
	}
}

// Subscribe implements agent.Events.
func (n *Node) Subscribe(convID string) *agent.Subscription { return n.hub.Subscribe(convID) }

// Dropped implements agent.Events: local subscribers closed for lagging.
func (n *Node) Dropped() int64 { return n.hub.Dropped() }

// Close implements agent.Events: it ends the local subscriptions (the manager is closing). The
// node itself stops with Leave.
func (n *Node) Close() { n.hub.Close() }

// send delivers queued events to the other processes: everything waiting (up to sendBatch) in
// one round trip. Text deltas are held per conversation and sent at most every deltaEvery,
// merged (up to deltaMerge bytes each), so streamed text costs a bounded rate of notifications
// whatever the model's pace; any other event of the conversation sends its held text first, so
// the order is kept. Replies to forwarded requests (packReply) go in the same notifications,
// after the events queued before them (text deltas still held may follow a reply: they are
// hints, and the next event of their conversation sends them first).
func (n *Node) send() {
	defer n.wg.Done()
	batch := make([]agent.Event, 0, sendBatch)
	var reps []packedReply // replies to send, carried while events queued before them wait
	defer func() { n.closeReplies(reps) }()
	held := map[string]agent.Event{} // conversation → its merged text delta not sent yet
	flush := n.clock.NewTimer(deltaEvery)
	flush.Stop()
	defer flush.Stop()
	armed := false
	var taken int64 // events taken from out so far
	for {
		var out []agent.Event
		batch = batch[:0]
		select {
		case <-n.ctx.Done():
			return
		case <-flush.C():
			armed = false
			for conv, e := range held {
				out = append(out, e)
				delete(held, conv)
			}
		case e := <-n.out:
			batch = append(batch, e)
		case r := <-n.replies:
			reps = append(reps, r)
		}
		// The replies waiting now, then the events: an event published before one of these
		// replies was queued before it, so it is in this batch — unless the batch fills up,
		// and then a reply waits for the batch that holds the last event queued before it
		// (packedReply.after), however busy the queue stays.
	replies:
		for len(reps) < 2*maxServing {
			select {
			case r := <-n.replies:
				reps = append(reps, r)
			default:
				break replies
			}
		}
	drain:
		for len(batch) < sendBatch {
			select {
			case e := <-n.out:
				batch = append(batch, e)
			default:
				break drain
			}
		}
		taken += int64(len(batch))
		if len(batch) > 0 {
			out = append(out, holdDeltas(batch, held)...)
			if len(held) > 0 && !armed {
				flush.Reset(deltaEvery)
				armed = true
			}
		}
		send, rest := readyReplies(reps, taken)
		if len(out) == 0 && len(send) == 0 {
			continue
		}
		msgs, packed := packReplies(n.encode(out), send)
		if err := n.sendAll(msgs); err != nil {
			if n.ctx.Err() == nil {
				n.log.Warn("cluster: send events", "events", len(out), "replies", len(send), "err", err)
				// What was in the batch is lost to the others: their subscribers reload.
				n.dropMu.Lock()
				n.dropAll = true
				n.dropMu.Unlock()
			}
			// The replies go alone, as they would have without events (closing included).
			n.replyAll(send)
		} else {
			n.stats.packed.Add(int64(packed))
		}
		reps = rest
	}
}

// readyReplies splits reps, in order, into those whose events were all taken (taken of them
// so far) and the rest.
func readyReplies(reps []packedReply, taken int64) (ready, rest []packedReply) {
	for _, r := range reps {
		if r.after <= taken {
			ready = append(ready, r)
		} else {
			rest = append(rest, r)
		}
	}
	return ready, rest
}

// closeReplies stops packing replies once the sender ends, and sends on their own the ones it
// carried and those still queued.
func (n *Node) closeReplies(carried []packedReply) {
	n.repMu.Lock()
	n.repClosed = true
	n.repMu.Unlock()
	rs := carried
	for {
		select {
		case r := <-n.replies:
			rs = append(rs, r)
			continue
		default:
		}
		break
	}
	n.replyAll(rs)
}

// packReplies adds reps to msgs: into the last packed events while they fit under maxPack,
// the rest into reps messages of their own. It returns how many went with events.
func packReplies(msgs []message, reps []packedReply) ([]message, int) {
	size, packed := 0, 0
	last := -1
	if k := len(msgs) - 1; k >= 0 && msgs[k].T == "evs" {
		last, size = k, len(msgs[k].Body)+convsSize(msgs[k].Convs)
	}
	for _, r := range reps {
		need := len(r.Body) + len(r.To) + 48 // {"to":…,"id":…,"body":…} around the body
		if last < 0 || size+need > maxPack {
			msgs = append(msgs, message{T: "reps"})
			last, size = len(msgs)-1, 0
		}
		msgs[last].Reps = append(msgs[last].Reps, r)
		if msgs[last].T == "evs" {
			packed++
		}
		size += need
	}
	return msgs, packed
}

// holdDeltas returns the events of batch to send now, in order, and keeps its text deltas in
// held (merged per conversation while they continue one another, same answer and next offset,
// up to deltaMerge bytes once written as JSON). A
// conversation's held text goes out before any other event of it.
func holdDeltas(batch []agent.Event, held map[string]agent.Event) []agent.Event {
	var out []agent.Event
	for _, e := range batch {
		h, ok := held[e.ConversationID]
		if e.Type == agent.EventTextDelta {
			if ok && h.Seq == e.Seq && e.Offset == h.Offset+len(h.Text) && escapedLen(h.Text)+escapedLen(e.Text) <= deltaMerge {
				h.Text += e.Text
				held[e.ConversationID] = h
				continue
			}
			if ok {
				out = append(out, h)
			}
			held[e.ConversationID] = e
			continue
		}
		if ok {
			out = append(out, h)
			delete(held, e.ConversationID)
		}
		out = append(out, e)
	}
	return out
}

// escapedLen bounds the length of s written as a JSON string by encoding/json (quotes left
// out): '<', '>', '&' and control characters take six bytes, '"' and '\\' two, U+2028 and U+2029
// six, and in text that is not valid UTF-8 every byte past ASCII may become six.
func escapedLen(s string) int {
	valid := utf8.ValidString(s)
	n := 0
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b < 0x20 || b == '<' || b == '>' || b == '&':
			n += 6
		case b == '"' || b == '\\':
			n += 2
		case b >= 0x80 && !valid:
			n += 6
		case b == 0xE2 && i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xA8 || s[i+2] == 0xA9):
			n += 6
			i += 2
		default:
			n++
		}
	}
	return n
}

// encode turns events into notifications, after the resyncs owed for dropped ones. Events that
// go out together are packed into as few notifications as fit (each notification is a commit
// on PostgreSQL's one notification queue and a wake-up of every listener). An event too large
// for a notification leaves its entries out (the receivers read them from the log); one still
// too large goes alone, through cluster_mail.
func (n *Node) encode(events []agent.Event) []message {
	var msgs []message
	n.dropMu.Lock()
	if n.dropAll {
		msgs = append(msgs, message{T: "resync"})
	} else {
		for conv := range n.dropped {
			msgs = append(msgs, message{T: "resync", Conv: conv})
		}
	}
	clear(n.dropped)
	n.dropAll = false
	n.dropMu.Unlock()
	var p packer
	for _, e := range events {
		b, err := json.Marshal(wireEvent{Event: e, Entries: e.Entries})
		if err == nil && len(b) > maxPayload {
			b, err = json.Marshal(wireEvent{Event: e})
		}
		if err != nil {
			n.log.Warn("cluster: encode event", "err", err)
			msgs = p.flush(msgs)
			msgs = append(msgs, message{T: "resync", Conv: e.ConversationID})
			continue
		}
		if len(b) > maxPack {
			msgs = p.flush(msgs)
			msgs = append(msgs, message{T: "ev", Conv: e.ConversationID, Body: b})
			continue
		}
		if p.size+p.cost(e.ConversationID, b) > maxPack {
			msgs = p.flush(msgs)
		}
		p.add(e.ConversationID, b)
	}
	return p.flush(msgs)
}

// maxPack bounds the events packed into one notification, leaving room under maxPayload for
// the message around them.
const maxPack = maxPayload - 256

// packer gathers encoded events into one "evs" message: a JSON array, in order, with the
// conversations they belong to (Conv when they share one, else Convs), which lets a receiver
// skip the events nobody there follows without decoding them.
type packer struct {
	body  []byte
	size  int      // of the body once closed, and of the conversations' names
	conv  string   // the events' conversation while they share one, else ""
	convs []string // the events' conversations, each once, in order of first event
	n     int
}

// cost is what adding an event of conv, encoded as b, adds to the packer's size.
func (p *packer) cost(conv string, b []byte) int {
	c := len(b) + 1
	if p.n > 0 && !slices.Contains(p.convs, conv) {
		c += len(conv) + 3 // "conv", in Convs
		if p.conv != "" {
			c += len(p.conv) + 3 // the first conversation goes into Convs too
		}
	}
	return c
}

func (p *packer) add(conv string, b []byte) {
	if p.n == 0 {
		p.body, p.conv, p.convs = append(p.body[:0], '['), conv, append(p.convs[:0], conv)
		p.size = len(b) + 2 // the brackets
	} else {
		p.size += p.cost(conv, b)
		p.body = append(p.body, ',')
		if !slices.Contains(p.convs, conv) {
			p.convs, p.conv = append(p.convs, conv), ""
		}
	}
	p.body = append(p.body, b...)
	p.n++
}

// flush appends the packed events to msgs as one message and empties the packer.
func (p *packer) flush(msgs []message) []message {
	if p.n == 0 {
		return msgs
	}
	body := append(p.body, ']')
	msg := message{T: "evs", Conv: p.conv, Body: json.RawMessage(append([]byte(nil), body...))}
	if p.conv == "" {
		msg.Convs = slices.Clone(p.convs)
	}
	msgs = append(msgs, msg)
	p.body, p.size, p.conv, p.convs, p.n = p.body[:0], 0, "", p.convs[:0], 0
	return msgs
}

// convsSize is what a message's Convs add to its notification.
func convsSize(convs []string) int {
	size := 0
	for _, c := range convs {
		size += len(c) + 3
	}
	return size
}

// sendAll notifies msgs in order in one round trip (large ones through cluster_mail first).
func (n *Node) sendAll(msgs []message) error {
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	defer cancel()
	var b pgx.Batch
	for _, msg := range msgs {
		payload, err := n.payload(ctx, eventsChannel, msg)
		if err != nil {
			return err
		}
		b.Queue(`SELECT pg_notify($1, $2)`, eventsChannel, payload)
	}
	n.stats.notifications.Add(int64(len(msgs)))
	metrics.ClusterNotifications.Add(float64(len(msgs)))
	return n.pool.SendBatch(ctx, &b).Close()
}
