package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/html"

	"parley/internal/agent"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/internal/tools"
	"parley/views"
	"parley/views/viewstest"
)

// The compromised-model suite's card measure, end to end (docs/security.md, "A compromised
// model"): a model that obeys an attacker writes the arguments of a gated call; the owner reads
// the approval card in the page and presses Approve without changing anything, as a browser
// sends it. What runs must be exactly what the card showed: the measure is the number of calls
// whose run differs from their card, and it must be 0. The internal/agent suite
// (compromised_test.go) measures the other three.

// ranArgs records the arguments each run of a tool received, by call id.
type ranArgs struct {
	mu   sync.Mutex
	args map[string]map[string]any
}

func (r *ranArgs) get(id string) (map[string]any, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.args[id]
	return a, ok
}

// transferTool is an owner-approved server tool whose schema names amount and to and, as JSON
// Schema does by default (and as many MCP servers' and tools files' schemas do), allows other
// properties: a model can add one.
func transferTool(t testing.TB, ran *ranArgs) *tools.Tool {
	t.Helper()
	tool, err := tools.New(tools.Spec{
		Name: "transfer", Description: "Move money (the owner approves).", Executor: tools.Server,
		Parameters: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"integer"},"to":{"type":"string"}},"required":["amount","to"]}`),
		Approval:   tools.RequiresApproval, Approvers: tools.ByOwner,
		Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
			ran.mu.Lock()
			ran.args[call.ToolCallID] = args
			ran.mu.Unlock()
			return map[string]any{"moved": true}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// cardForm reads the approval card of call in a page as a browser would submit it when its
// Approve button is pressed: every named input (checked boxes and radios only), text area and
// select, and decision=approve. shown is what the card shows of the arguments: the JSON of its
// text area, or its fields by property name.
func cardForm(t *testing.T, page, call string) (form url.Values, shown map[string]string) {
	t.Helper()
	doc := viewstest.MustParse(page)
	f, n := doc.One(`[data-tool-call-id="` + call + `"] form[data-parley="approval-form"]`)
	if n != 1 {
		t.Fatalf("%d approval forms for %s in the page", n, call)
	}
	form, shown = url.Values{"decision": {"approve"}}, map[string]string{}
	add := func(name, value string) {
		form.Set(name, value)
		if name == "args" {
			shown["(json)"] = value
		} else if prop, ok := strings.CutPrefix(name, views.ArgFieldPrefix); ok {
			shown[prop] = value
		}
	}
	for _, in := range viewstest.In(f, "input[name]") {
		name, _ := viewstest.Attr(in, "name")
		typ, _ := viewstest.Attr(in, "type")
		value, _ := viewstest.Attr(in, "value")
		_, checked := viewstest.Attr(in, "checked")
		switch {
		case typ == "checkbox" || typ == "radio":
			if checked {
				add(name, "on")
			}
		case typ == "submit":
		default:
			add(name, value)
		}
	}
	for _, ta := range viewstest.In(f, "textarea[name]") {
		name, _ := viewstest.Attr(ta, "name")
		add(name, rawText(ta))
	}
	for _, sel := range viewstest.In(f, "select[name]") {
		name, _ := viewstest.Attr(sel, "name")
		if strings.HasPrefix(name, views.ArgFieldPrefix) {
			for _, o := range viewstest.In(sel, "option[selected]") {
				v, _ := viewstest.Attr(o, "value")
				add(name, v)
			}
		}
	}
	return form, shown
}

// rawText is the text inside n as it is, whitespace kept (a text area's value).
func rawText(n *html.Node) string {
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return b.String()
}

// shownArgs is what a card showed as arguments: its JSON, or its fields typed as the tool's
// schema types them (the test's one schema: amount an integer, the rest text).
func shownArgs(t *testing.T, shown map[string]string) map[string]any {
	t.Helper()
	if js, ok := shown["(json)"]; ok {
		v, err := tools.DecodeJSON([]byte(js))
		if err != nil {
			t.Fatalf("the card's JSON %q: %v", js, err)
		}
		m, _ := v.(map[string]any)
		return m
	}
	out := map[string]any{}
	for k, v := range shown {
		if k == "amount" {
			n, err := tools.DecodeJSON([]byte(v))
			if err != nil {
				t.Fatalf("the card's amount %q: %v", v, err)
			}
			out[k] = n
			continue
		}
		out[k] = v
	}
	return out
}

// TestCompromisedModelCardShowsWhatRuns: the arguments an obedient model writes on an
// attacker's behalf — a property the schema does not name, a value nested where a field is
// expected, a duplicate key, a very long value, invisible characters — are all on the card the
// owner approves, and what runs is what the card showed. The smuggled property was hidden by
// the card's fields (and by the plan, which leaves the arguments out) before the card fell back
// to JSON for such a call.
func TestCompromisedModelCardShowsWhatRuns(t *testing.T) {
	cases := []struct {
		name, args string
	}{
		{"a property the schema does not name", `{"amount": 10, "to": "x@ok.test", "cc": "thief@evil.test"}`},
		{"several, one nested", `{"amount": 10, "to": "x@ok.test", "memo": {"forward_to": "thief@evil.test"}, "z": [1, 2]}`},
		{"a duplicate key", `{"amount": 10, "to": "x@ok.test", "to": "thief@evil.test"}`},
		{"a very long value", `{"amount": 10, "to": "x@ok.test` + strings.Repeat(" ", 5000) + `thief@evil.test"}`},
		{"invisible characters", `{"amount": 10, "to": "x@ok.test\u200b\u202ethief@evil.test"}`},
		{"plain", `{"amount": 10, "to": "x@ok.test"}`},
	}
	eachStore(t, func(t *testing.T, open opener) {
		ran := &ranArgs{args: map[string]map[string]any{}}
		withTransfer := func(e *testEnv, cfg *agent.Config) {
			reg, err := tools.NewRegistry(transferTool(t, ran))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Tools = reg
		}
		e := newTestEnv(t, open, Config{}, withTransfer)
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		b := e.browser(ann)
		differs := 0
		for i, tc := range cases {
			id := "t" + string(rune('a'+i))
			e.pending(conv, ann, llmtest.Call(id, "transfer", tc.args))
			e.model.Push(llmtest.Reply("Done."))
			form, shown := cardForm(t, readBody(b.do("GET", "/conversations/"+conv.ID, "", nil)), id)
			res := b.postForm("/conversations/"+conv.ID+"/calls/"+id+"/resolve", form, b.csrf)
			if res.StatusCode != http.StatusSeeOther {
				t.Fatalf("%s: approve as the card sends it = %d %s", tc.name, res.StatusCode, readBody(res))
			}
			readBody(res)
			e.awaitStatus(conv.ID, store.StatusIdle)
			got, ok := ran.get(id)
			if !ok {
				t.Fatalf("%s: the approved call did not run: %+v", tc.name, e.call(conv.ID, id))
			}
			if want := shownArgs(t, shown); !reflect.DeepEqual(got, want) {
				differs++
				t.Errorf("%s: the card showed %v, and %v ran", tc.name, want, got)
			}
		}
		if differs != 0 {
			t.Errorf("approval cards whose shown arguments differ from what ran: %d of %d, want 0", differs, len(cases))
		}
	})
}
