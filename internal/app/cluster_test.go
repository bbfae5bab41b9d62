package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"parley/internal/store/pgtest"
	"parley/internal/tools"
)

// TestAppsShareOnePostgreSQL: three Apps on one database. A conversation's turn runs where its
// message landed; its event stream on another App sees every entry; the approval sent to a
// third App is answered there once (then stale); the next message sent anywhere is accepted
// at once (no stale "a turn is in progress").
func TestAppsShareOnePostgreSQL(t *testing.T) {
	url := pgtest.NewURL(t)
	a := startIn(t, url, t.TempDir(), true)
	b := startIn(t, url, t.TempDir(), false)
	c := startIn(t, url, t.TempDir(), false)
	_, body := a.call(t, "POST", "/api/v1/conversations", `{"title":"cluster"}`)
	conv := body["id"].(string)
	events, stream := b.entries(t, conv)
	defer stream.Body.Close()
	if status, body := a.call(t, "POST", "/api/v1/conversations/"+conv+"/messages", `{"text":"email bob@example.com about lunch"}`); status != 202 {
		t.Fatalf("message on a: %d %v", status, body)
	}
	waitEntry(t, events, "tool_call")
	v := waitConv(t, c, conv, "awaiting the approval (seen through c)", func(v convJSON) bool { return len(v.Pending) == 1 && v.Status == "awaiting" })
	var callID string
	for id := range v.Pending {
		callID = id
	}
	// The plan of an edit, asked of b, which does not own the conversation: read through its
	// owner, the dry run here, nothing written.
	plan := "/api/v1/conversations/" + conv + "/calls/" + callID + "/plan"
	if status, body := b.call(t, "POST", plan, `{"arguments":{"to":"carol@example.com","subject":"lunch","body":"Noon?"}}`); status != 200 ||
		!strings.Contains(fmt.Sprint(body["plan"]), "Would send an email to carol@example.com") {
		t.Fatalf("plan preview on b: %d %v", status, body)
	}
	resolve := "/api/v1/conversations/" + conv + "/calls/" + callID + "/resolve"
	if status, body := c.call(t, "POST", resolve, `{"decision":"approve"}`); status != 200 || body["ok"] != true {
		t.Fatalf("approve on c: %d %v", status, body)
	}
	if status, body := b.call(t, "POST", resolve, `{"decision":"approve"}`); status != 409 || body["error"].(map[string]any)["kind"] != "stale" {
		t.Fatalf("second approve on b: %d %v", status, body)
	}
	waitEntry(t, events, "tool_result")
	waitEntry(t, events, "assistant_message")
	waitConv(t, b, conv, "idle", func(v convJSON) bool { return v.Status == "idle" })
	if status, body := b.call(t, "POST", "/api/v1/conversations/"+conv+"/messages", `{"text":"thanks"}`); status != 202 {
		t.Fatalf("next message on b: %d %v", status, body)
	}
	waitEntry(t, events, "user_message")
	waitEntry(t, events, "assistant_message")
	out, err := a.app.Store().ListOutbox(context.Background(), conv)
	if err != nil || len(out) != 1 {
		t.Fatalf("outbox: %v %+v", err, out)
	}
}

// TestEmbeddedStoreIsSingleProcess: a second App on the data directory of a running one
// refuses to start with one clear line; once the first stopped, it starts.
func TestEmbeddedStoreIsSingleProcess(t *testing.T) {
	dir := t.TempDir()
	r := startIn(t, "", dir, true)
	if status, _ := r.call(t, "GET", "/healthz", ""); status != 200 {
		t.Fatalf("healthz: %d", status) // and Run has started
	}
	env := map[string]string{"PARLEY_ADDR": "127.0.0.1:0", "PARLEY_DATA_DIR": dir, "PARLEY_MODEL": "demo"}
	cfg, err := FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PasswordCost: bcrypt.MinCost}
	_, err = New(context.Background(), cfg, opts)
	if err == nil || !strings.Contains(err.Error(), "another parley process") || !strings.Contains(err.Error(), dir) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("second App on %s: %v", dir, err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	second, err := New(context.Background(), cfg, opts)
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
}

// clusterEnv is a kill-test environment whose processes share one PostgreSQL database and
// detect a dead peer fast: TTL 1.5 s, a scan every 200 ms.
func clusterEnv(t *testing.T, modelURL, hookURL string) *killEnv {
	env := newKillEnv(t, pgtest.NewURL(t), modelURL, hookURL)
	env.env = append(env.env, "PARLEY_NODE_TTL=1500ms", "PARLEY_ORPHAN_SCAN=200ms")
	return env
}

// TestKillOwnerMidTurn: two binaries on one database; the one running a turn is killed (-9)
// mid-stream; the survivor takes the conversation over by itself and finishes the turn (the cut
// model call retried once, with the same messages).
func TestKillOwnerMidTurn(t *testing.T) {
	arrived, release := make(chan struct{}, 1), newGate()
	model := &modelServer{script: []modelStep{halfAnswer("Half an ans", arrived, release), answer(finalAnswer)}}
	ms := testServer(t, model, release)
	env := clusterEnv(t, ms.URL, "http://127.0.0.1:1")
	p1, p2 := env.serve(t), env.serve(t)
	conv := startTurn(t, env.api(p1), "say something")
	waitChan(t, arrived, "half of the answer")
	p1.kill9(t)
	killed := time.Now()
	release.open()
	// Only the survivor's own scan can notice: nothing is asked of it until the turn is over.
	deadline := time.Now().Add(waitAtMost)
	for {
		if reqs := model.requests(); len(reqs) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the survivor did not take the turn over within %v", waitAtMost)
		}
		time.Sleep(pollEvery)
	}
	took := time.Since(killed)
	v := waitConv(t, env.api(p2), conv, "finished on the survivor", finished)
	// The killed process's sessions ended with it, so the survivor's next scan takes over
	// (the heartbeat's TTL is the bound only when a network vanishes without closing sockets).
	t.Logf("the survivor resumed the turn %v after the kill (TTL 1.5 s, scan 200 ms)", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Fatalf("takeover took %v, more than 10 s", took)
	}
	if len(v.Messages) != 2 {
		t.Fatalf("messages: %s", v)
	}
	if n := len(model.requests()); n != 2 {
		t.Fatalf("%d model requests, want 2", n)
	}
}

// TestKillOwnerWhileAwaiting: the owner of a conversation awaiting approval is killed; the
// approval sent to the survivor right away is accepted once the owner's heartbeat is stale, and
// the webhook runs once with the call's key.
func TestKillOwnerWhileAwaiting(t *testing.T) {
	const callID = "call_gated_1"
	model := &modelServer{script: []modelStep{callTool(callID, gatedTool, `{"item":"printer"}`), answer(finalAnswer)}}
	ms := testServer(t, model, nil)
	hook := newReceiver(false)
	hs := testServer(t, hook, nil)
	env := clusterEnv(t, ms.URL, hs.URL)
	p1, p2 := env.serve(t), env.serve(t)
	conv := startTurn(t, env.api(p1), "open a ticket for the printer")
	waitConv(t, env.api(p2), conv, "awaiting the approval", func(v convJSON) bool {
		return v.Status == "awaiting" && v.Pending[callID].Kind == "approval"
	})
	p1.kill9(t)
	began := time.Now()
	r2 := env.api(p2)
	if status, body := r2.call(t, "POST", "/api/v1/conversations/"+conv+"/calls/"+callID+"/resolve", `{"decision":"approve"}`); status != 200 || body["ok"] != true {
		t.Fatalf("approve on the survivor: %d %v", status, body)
	}
	t.Logf("the approval sent to the survivor was answered %v after the kill", time.Since(began).Round(time.Millisecond))
	waitConv(t, r2, conv, "finished", finished)
	keys, applied, _ := hook.seen()
	if len(keys) != 1 || len(applied) != 1 || keys[0] != (tools.Call{ConversationID: conv, ToolCallID: callID}).Key() {
		t.Fatalf("webhook keys %v applied %v: want one run with the call's key", keys, applied)
	}
}
