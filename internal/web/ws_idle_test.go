package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"parley/internal/auth"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// socketGoroutines counts this process's goroutines by the part of a conversation socket they
// run: "pump", "reader", "writer", and "handler" (the upgrade request's, if it still runs).
func socketGoroutines() map[string]int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	counts := map[string]int{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		for part, fn := range map[string]string{
			"pump":    "web.(*convSocket).pump(",
			"reader":  "web.(*convSocket).readLoop(",
			"writer":  "web.(*socket).write(",
			"handler": "web.(*Server).conversationSocket(",
		} {
			if strings.Contains(g, fn) {
				counts[part]++
			}
		}
	}
	return counts
}

// TestIdleSocketKeepsTwoGoroutinesAndStillServes (issue 18): an idle page socket keeps its
// pump and its reader, nothing else (the upgrade's goroutine has ended, no writer waits), and
// still pings on its keepalive, delivers the conversation's events, and closes with a policy
// violation when a re-check finds its session gone. Not parallel: it counts the process's
// goroutines.
func TestIdleSocketKeepsTwoGoroutinesAndStillServes(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	ann := e.user("ann", store.RoleMember)
	conv := e.conversation(ann)
	b := e.browser(ann)

	idle := func(want map[string]int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := socketGoroutines()
			if got["pump"] == want["pump"] && got["reader"] == want["reader"] && got["writer"] == want["writer"] && got["handler"] == want["handler"] {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("socket goroutines = %v, want %v", got, want)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	idle(map[string]int{}) // nothing left from earlier tests

	pings := make(chan struct{}, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.ts.URL, "http")+"/conversations/"+conv.ID+"/ws", &websocket.DialOptions{
		HTTPClient: b.hc, HTTPHeader: map[string][]string{"Origin": {e.ts.URL}},
		OnPingReceived: func(context.Context, []byte) bool {
			pings <- struct{}{}
			return true // answer with a pong
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.CloseNow() }()
	// The page's reader: frames into a channel, control frames (pings) answered as it reads.
	frames := make(chan frame, 256)
	closed := make(chan websocket.StatusCode, 1)
	go func() {
		defer close(frames)
		for {
			_, data, err := conn.Read(context.Background())
			if err != nil {
				closed <- websocket.CloseStatus(err)
				return
			}
			var f frame
			if json.Unmarshal(data, &f) == nil {
				frames <- f
			}
		}
	}()
	next := func(what string, ok func(frame) bool) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case f, open := <-frames:
				if !open {
					t.Fatalf("the socket closed before a %s frame", what)
				}
				if ok(f) {
					return
				}
			case <-timeout:
				t.Fatalf("no %s frame within 5 s", what)
			}
		}
	}
	next("status", func(f frame) bool { return f.Target == "status" })
	one := map[string]int{"pump": 1, "reader": 1}
	idle(one)

	// Keepalive: each pingInterval the idle socket starts a writer for one ping, which ends.
	for i := range 2 {
		e.clk.Advance(pingInterval)
		select {
		case <-pings:
		case <-time.After(5 * time.Second):
			t.Fatalf("ping %d: none within 5 s of the keepalive", i+1)
		}
		idle(one)
	}

	// Events: a message and its answer reach the idle page.
	e.say(conv, ann, "hello from the page", llmtest.Reply("hi there"))
	next("message", func(f frame) bool { return f.HTML != nil && strings.Contains(*f.HTML, "hello from the page") })
	next("answer", func(f frame) bool { return f.HTML != nil && strings.Contains(*f.HTML, "hi there") })
	e.awaitStatus(conv.ID, "idle")
	idle(one)

	// Re-authorization: the session's row goes (another process signed it out); the next
	// re-check closes the socket, and every goroutine it had ends.
	if err := e.st.DeleteSession(context.Background(), auth.Hash(sessionValue(t, b))); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(e.srv.cfg.LiveRecheck)
	select {
	case st := <-closed:
		if st != websocket.StatusPolicyViolation {
			t.Fatalf("after the session went, the socket closed with %v, want policy violation", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the socket outlived its session")
	}
	idle(map[string]int{})
}

// TestSmallBuffersKeepBytesReadEarly: the upgrade's hijack hands over buffers of
// socketReadBuffer and socketWriteBuffer, and bytes the client sent right after the request
// (already in net/http's buffer) are the first the socket reads.
func TestSmallBuffersKeepBytesReadEarly(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := smallBuffers{w}.Hijack()
		if err != nil {
			got <- "hijack: " + err.Error()
			return
		}
		defer conn.Close()
		if brw.Reader.Size() != socketReadBuffer || brw.Writer.Size() != socketWriteBuffer {
			got <- fmt.Sprintf("buffers %d and %d", brw.Reader.Size(), brw.Writer.Size())
			return
		}
		line, err := brw.Reader.ReadString('\n')
		if err != nil {
			got <- "read: " + err.Error()
			return
		}
		got <- line
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// One write: the request and what follows it reach net/http's buffer together.
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\nearly bytes\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-got:
		if line != "early bytes\n" {
			t.Fatalf("the socket read %q first, want the early bytes", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not read within 5 s")
	}
}
