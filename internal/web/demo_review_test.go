package web

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"parley/internal/agent"
	"parley/internal/llm/demo"
	"parley/internal/store"
	"parley/internal/tools"
)

// withDemoModel runs the agent on the demo model with the demo's tools, as `go run ./cmd/web`
// does.
func withDemoModel(t *testing.T) envOption {
	return func(e *testEnv, cfg *agent.Config) {
		reg, err := tools.NewRegistry(tools.Builtins(tools.BuiltinDeps{Clock: e.aclk, Outbox: storeOutbox{e.st}, TestTools: true})...)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Tools, cfg.Provider = reg, demo.New(demo.Config{Pace: demo.NoPace})
	}
}

// TestDemoDeployWaitsForAReviewer follows the README's walk: a reviewer's empty inbox says how
// to make a call arrive; a member says "deploy the website" to the demo model; the deploy call
// waits for a reviewer (its owner's approval is refused), the reviewer's inbox lists it, and
// the reviewer's approval runs it.
func TestDemoDeployWaitsForAReviewer(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{}, withDemoModel(t))
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		r := e.browser(rita)

		body := readBody(r.do("GET", "/inbox", "", nil))
		if !strings.Contains(body, `data-parley="inbox-try"`) || !strings.Contains(body, "deploy the website") {
			t.Fatalf("the empty inbox does not say how to try it: %.2000s", body)
		}

		conv := e.conversation(ann)
		if err := e.m.Send(context.Background(), conv.ID, as(ann), "deploy the website"); err != nil {
			t.Fatal(err)
		}
		var id string
		e.await(conv.ID, "a deploy call awaiting", func(v agent.View) bool {
			for _, c := range v.Calls {
				if c.Name == "deploy" && c.Status == store.CallAwaiting {
					id = c.ID
					return true
				}
			}
			return false
		})

		path := "/api/v1/conversations/" + conv.ID + "/calls/" + id + "/resolve"
		res := e.script(ann).api("POST", path, `{"decision":"approve"}`)
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("the owner approves their own deploy: %d %s", res.StatusCode, readBody(res))
		}
		readBody(res)

		body = readBody(r.do("GET", "/inbox", "", nil))
		if !strings.Contains(body, `data-tool-call-id="`+id+`"`) {
			t.Fatalf("the reviewer's inbox does not list the deploy call %s: %.3000s", id, body)
		}

		res = e.script(rita).api("POST", path, `{"decision":"approve"}`)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("the reviewer approves: %d %s", res.StatusCode, readBody(res))
		}
		readBody(res)
		e.awaitCalls(conv.ID, store.CallResolved, id)
	})
}
