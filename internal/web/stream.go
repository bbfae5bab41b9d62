package web

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"parley/internal/agent"
	"parley/views"
)

// The streaming answer of a conversation is rendered once for every page socket of this
// process that follows it, not once per socket: N open pages of one conversation cost one
// Markdown render per tick, not N.
//
// There is no goroutine of its own. Each socket's pump (ws.go) feeds it the text deltas it gets
// (every pump gets every delta; the offsets make feeding idempotent: what the text already has
// is skipped), asks it to render when the pump's own window ends (tick: a render happens only
// when the text changed and the shared window since the last render has passed, so the first
// pump to ask renders and the others find it done), and takes the latest render for its page
// (latest). The window is the one a socket had (streamGap: deltaFlush, growing past streamUnit).

// streamSet is this process's shared streaming answers, one per conversation that a socket
// follows. The zero value is ready; the mutex guards only the map and the member counts.
type streamSet struct {
	mu    sync.Mutex
	convs map[string]*sharedStream
	// renders counts the Markdown renders of streaming text, for tests and benchmarks.
	renders atomic.Int64
}

// join returns the conversation's shared stream with the caller as a new member of it; leave
// when done (the last member's leave drops it).
func (ss *streamSet) join(convID string) *streamMember {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.convs == nil {
		ss.convs = map[string]*sharedStream{}
	}
	s := ss.convs[convID]
	if s == nil {
		s = &sharedStream{set: ss, past: map[*streamMember]bool{}}
		ss.convs[convID] = s
	}
	s.mu.Lock()
	s.members++
	s.mu.Unlock()
	return &streamMember{sharedStream: s}
}

func (ss *streamSet) leave(convID string, m *streamMember) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := m.sharedStream
	s.mu.Lock()
	s.members--
	delete(s.past, m)
	last := s.members == 0
	s.mu.Unlock()
	if last && ss.convs[convID] == s {
		delete(ss.convs, convID)
	}
}

// streamMember is one socket's hold on its conversation's shared stream.
type streamMember struct{ *sharedStream }

// forget tells that the member is past every answer before seq (it was logged or ended, the
// socket's page no longer shows it): once every member is past the stream's answer, its text
// and render are dropped. Until then a member behind the others may still need its last render.
func (m *streamMember) forget(before int64) {
	s := m.sharedStream
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seq == 0 || s.seq >= before {
		return
	}
	s.past[m] = true
	if len(s.past) >= s.members {
		s.seq, s.text, s.dirty, s.rendered = 0, nil, false, streamRender{}
		clear(s.past)
	}
}

// streamRender is one render of an answer's text so far.
type streamRender struct {
	seq  int64  // the answer's (agent.View.StreamSeq, the deltas' Seq)
	n    int    // bytes of its text rendered
	html string // views.Streaming of them
}

// sharedStream is one conversation's streaming answer: its text as the deltas gave it, and its
// latest render. Its text is bounded by the agent's bound on an answer (MaxAnswerBytes) and
// dropped once its answer is over (forget) or its last socket left.
type sharedStream struct {
	set *streamSet

	mu         sync.Mutex
	members    int                    // the sockets that hold it
	past       map[*streamMember]bool // the members past the answer (forget)
	seq        int64                  // the answer text is of
	text       []byte                 // its text so far
	dirty      bool                   // text has bytes the latest render does not show
	lastRender time.Time
	rendered   streamRender
}

// seed takes an answer's text as a view read it (a socket that connects, or that lost track):
// the newer answer, or more of the same one, or what replaced the text (a call that was tried
// again) wins over what the stream has. It does not render: the socket that read the view
// shows it itself, and the next delta renders for everyone.
func (s *sharedStream) seed(seq int64, text string) {
	if seq == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq < s.seq || (seq == s.seq && strings.HasPrefix(string(s.text), text)) {
		return // the stream already has it, or more
	}
	if seq > s.seq {
		clear(s.past)
	}
	s.seq, s.text = seq, append(s.text[:0], text...)
	s.dirty = true
}

// feed adds a text delta. The part the text already has is skipped; a delta of an earlier
// answer is dropped; gap reports a delta the text cannot take (it starts past the text's end,
// or it does not agree with the text, and is not the start of it): the caller seeds the stream
// again from a view.
func (s *sharedStream) feed(ev agent.Event) (gap bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case ev.Seq < s.seq:
		return false // an answer that is over
	case ev.Seq > s.seq:
		s.seq, s.text = ev.Seq, s.text[:0]
		clear(s.past)
	}
	end := ev.Offset + len(ev.Text)
	switch {
	case ev.Offset > len(s.text):
		return true // text was missed
	case end <= len(s.text) && string(s.text[ev.Offset:end]) == ev.Text:
		return false // already here (a socket that read it with the view, or another socket's feed)
	case string(s.text[ev.Offset:min(end, len(s.text))]) != ev.Text[:min(end, len(s.text))-ev.Offset]:
		// The text disagrees with what is here: the answer started over (its call was tried
		// again after a crash, with the same seq).
		if ev.Offset > 0 {
			return true
		}
		s.text = s.text[:0]
	}
	s.text = append(s.text, ev.Text[len(s.text)-ev.Offset:]...)
	s.dirty = true
	return false
}

// tick renders the text when it changed and the window since the last render has passed (or
// at once with force: an event that must follow the text on the page). wait is how long until
// the window lets the changed text be rendered (0: nothing waits).
func (s *sharedStream) tick(ctx context.Context, now time.Time, force bool) (wait time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dirty {
		return 0, nil
	}
	if since := now.Sub(s.lastRender); !force && since < streamGap(len(s.text)) {
		return streamGap(len(s.text)) - since, nil
	}
	// The render serves every member: the asking socket's end does not cut it.
	var b bytes.Buffer
	if err := views.Streaming(string(s.text)).Render(context.WithoutCancel(ctx), &b); err != nil {
		return 0, err
	}
	// The next delta's window is measured from this render.
	s.lastRender = now
	s.set.renders.Add(1)
	s.dirty = false
	s.rendered = streamRender{seq: s.seq, n: len(s.text), html: b.String()}
	return 0, nil
}

// latest is the latest render (seq 0 when none).
func (s *sharedStream) latest() streamRender {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rendered
}
