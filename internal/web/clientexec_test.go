package web

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"parley/internal/agent"
)

// TestClientExecReachesTheOwnerOnly: a browser tool's run goes to the pages and event streams
// of the conversation's owner, never to a reviewer's or an admin's who follow it (their browser
// would act, although the agent refuses their result).
func TestClientExecReachesTheOwnerOnly(t *testing.T) {
	call := agent.CallView{ID: "geo_1", Name: "geolocation", Args: json.RawMessage(`{}`), Status: agent.CallAwaiting}
	ev := agent.Event{Type: agent.EventClientExec, ToolCallID: "geo_1", Call: &call}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		by   agent.Principal
		want bool
	}{
		{"the owner", agent.Principal{UserID: "ann", Role: agent.RoleMember}, true},
		{"a reviewer", agent.Principal{UserID: "rita", Role: agent.RoleReviewer}, false},
		{"an admin", agent.Principal{UserID: "root", Role: agent.RoleAdmin}, false},
	} {
		guard := &liveGuard{convID: "c1", ownerID: "ann", by: tc.by}
		cs := &convSocket{socket: &socket{log: log}, id: "c1", by: tc.by, guard: guard, clientSent: map[string]bool{}}
		cs.clientExec(ev)
		if got := len(cs.queue) == 1 && strings.Contains(string(cs.queue[0]), `"client_exec"`); got != tc.want {
			t.Errorf("%s's page: client_exec sent %v, want %v (%d frames)", tc.name, got, tc.want, len(cs.queue))
		}

		rec := httptest.NewRecorder()
		es := &eventStream{id: "c1", st: &sseStream{w: rec, rc: http.NewResponseController(rec)}, guard: guard, log: log}
		if !es.live(context.Background(), ev, true) {
			t.Fatalf("%s's stream ended on a client_exec", tc.name)
		}
		if got := strings.Contains(rec.Body.String(), "event: client_exec"); got != tc.want {
			t.Errorf("%s's event stream: client_exec sent %v, want %v: %q", tc.name, got, tc.want, rec.Body.String())
		}
	}
}
