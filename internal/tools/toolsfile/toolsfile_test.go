package toolsfile

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"parley/internal/fault"
	"parley/internal/tools"
	"parley/internal/tools/goadapter"
	"parley/internal/tools/httpadapter"
)

// examplePath is the reference example (every tool type; it needs a secret, a credential
// resolver and a Go adapter, which env provides); starterPath is the one a newcomer runs as is.
const (
	examplePath = "../../../examples/tools-reference.json"
	starterPath = "../../../examples/tools.json"
)

func registry(t testing.TB) *goadapter.Registry {
	t.Helper()
	r := goadapter.NewRegistry()
	err := r.Register(goadapter.Entry{
		Key: "billing.load_invoice", Enabled: true, Label: "Load invoice", Description: "Load an invoice by id.",
		Adapter: goadapter.Func(func(ctx context.Context, p map[string]any) (any, error) {
			return map[string]any{"invoice_id": p["invoice_id"], "total": int64(120)}, nil
		}),
	})
	if err == nil {
		err = r.Register(goadapter.Entry{Key: "billing.disabled", Description: "Off.", Adapter: goadapter.Func(func(context.Context, map[string]any) (any, error) { return nil, nil })})
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var resolver = httpadapter.CredentialResolverFunc(func(ctx context.Context, ref string) (http.Header, error) {
	if ref == "unknown" {
		return nil, errors.New("no such credential")
	}
	return http.Header{"Authorization": {"Bearer cred-" + ref}}, nil
})

func env(t testing.TB) Env {
	return Env{
		Getenv: func(name string) string {
			if name == "TICKET_WEBHOOK_SECRET" {
				return "whsec_" + base64.StdEncoding.EncodeToString([]byte("ticket-secret"))
			}
			return ""
		},
		Adapters:    registry(t),
		Credentials: resolver,
	}
}

func TestSchemaCopyMatchesShippedSchema(t *testing.T) {
	shipped, err := os.ReadFile("../../../schemas/tools.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shipped, schemaJSON) {
		t.Fatal("internal/tools/toolsfile/tools.schema.json differs from schemas/tools.schema.json: copy the shipped schema over")
	}
	if _, err := compiled(); err != nil {
		t.Fatal(err)
	}
}

// TestStarterLoadsAsItIs: examples/tools.json needs nothing: no variable, no credential
// resolver, no adapter.
func TestStarterLoadsAsItIs(t *testing.T) {
	ts, err := Load(starterPath, Env{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(ts) != 4 {
		t.Fatalf("%d tools, want 4", len(ts))
	}
}

// TestExampleLoads loads examples/tools-reference.json and checks it exercises every tool type the
// schema declares, against example.test hosts only.
func TestExampleLoads(t *testing.T) {
	ts, err := Load(examplePath, env(t))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	byName := map[string]*tools.Tool{}
	for _, tl := range ts {
		byName[tl.Name()] = tl
	}
	checks := []struct {
		name      string
		executor  tools.Executor
		gated     bool
		attempts  int
		timeout   time.Duration
		approvers tools.Approvers
	}{
		{"create_ticket", tools.Server, true, 4, 30 * time.Second, tools.ByReviewer},
		{"get_weather", tools.Server, false, 3, 0, tools.ByOwner},
		{"add_note", tools.Server, true, 1, 0, tools.ByOwner},
		{"confirm_address", tools.Human, false, 1, 600 * time.Second, tools.ByOwner},
		{"pick_file", tools.Client, false, 1, 120 * time.Second, tools.ByOwner},
		{"load_invoice", tools.Server, false, 3, 0, tools.ByOwner},
	}
	if len(ts) != len(checks) {
		t.Fatalf("%d tools, want %d", len(ts), len(checks))
	}
	for _, c := range checks {
		tl := byName[c.name]
		if tl == nil {
			t.Fatalf("tool %s missing", c.name)
		}
		if tl.Executor() != c.executor || tl.Gated() != c.gated || tl.MaxAttempts() != c.attempts || tl.Timeout() != c.timeout || tl.Approvers() != c.approvers {
			t.Errorf("%s: executor %s gated %v attempts %d timeout %v approvers %s", c.name, tl.Executor(), tl.Gated(), tl.MaxAttempts(), tl.Timeout(), tl.Approvers())
		}
	}
	if byName["load_invoice"].Description() != "Load an invoice by id." {
		t.Errorf("go tool description = %q, want the adapter's", byName["load_invoice"].Description())
	}

	raw, _ := os.ReadFile(examplePath)
	var doc struct {
		Tools []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Defs struct {
			Tool struct {
				Properties struct {
					Type struct {
						Enum []string `json:"enum"`
					} `json:"type"`
				} `json:"properties"`
			} `json:"tool"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(schemaJSON, &schema); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, tl := range doc.Tools {
		used[tl["type"].(string)] = true
		for _, u := range []any{tl["url"], nested(tl, "request", "url_template"), nested(tl, "request", "url")} {
			if s, ok := u.(string); ok {
				pu, err := url.Parse(strings.NewReplacer("{{ ", "", " }}", "").Replace(s))
				if err != nil || !strings.HasSuffix(pu.Hostname(), ".example.test") {
					t.Errorf("%s: URL %q is not on an example.test host", tl["name"], s)
				}
			}
		}
	}
	for _, typ := range schema.Defs.Tool.Properties.Type.Enum {
		if !used[typ] {
			t.Errorf("examples/tools-reference.json has no %s tool", typ)
		}
	}
}

func nested(m map[string]any, k1, k2 string) any {
	inner, _ := m[k1].(map[string]any)
	return inner[k2]
}

// tool wraps tool objects in a file.
func file(toolsJSON ...string) []byte {
	return []byte(`{"tools":[` + strings.Join(toolsJSON, ",") + `]}`)
}

const params = `"parameters":{"type":"object","properties":{"city":{"type":"string"}}}`

// TestRefusals lists every refusal of the loader with the JSON path and tool it must name.
func TestRefusals(t *testing.T) {
	webhook := func(extra string) string {
		return `{"name":"hook","type":"webhook","description":"d",` + params + `,"url":"https://hooks.example.test/x","secret_env":"TICKET_WEBHOOK_SECRET"` + extra + `}`
	}
	httpTool := func(request, extra string) string {
		return `{"name":"web","type":"http","description":"d",` + params + `,"request":` + request + `,"allowed_hosts":["api.example.test"]` + extra + `}`
	}
	const get = `{"method":"GET","url_template":"https://api.example.test/w/{{ city }}"}`
	tests := []struct {
		name       string
		data       []byte
		production bool
		path       string
		tool       string
		message    string
	}{
		{"not JSON", []byte(`{"tools": [`), false, "", "", "not valid JSON"},
		{"trailing data", []byte(`{"tools": []} {}`), false, "", "", "not valid JSON"},
		{"no tools", []byte(`{}`), false, "", "", "tools"},
		{"unknown top-level key", []byte(`{"tools":[],"extra":1}`), false, "", "", "extra"},
		{"tool is not an object", file(`"x"`), false, "/tools/0", "", "object"},
		{"bad name", file(`{"name":"has space","type":"client","description":"d"}`), false, "/tools/0/name", "has space", "pattern"},
		{"unknown type", file(`{"name":"t","type":"lambda","description":"d"}`), false, "/tools/0/type", "t", "must be one of"},
		{"unknown key", file(webhook(`,"request":{}`)), false, "/tools/0/request", "hook", `unknown key "request" for a webhook tool`},
		{"missing description", file(`{"name":"c","type":"client"}`), false, "/tools/0", "c", "description"},
		{"bad approval", file(`{"name":"c","type":"client","description":"d","approval":"maybe"}`), false, "/tools/0/approval", "c", "auto"},
		{"zero timeout", file(`{"name":"c","type":"client","description":"d","timeout_secs":0}`), false, "/tools/0/timeout_secs", "c", ">= 1"},
		{"parameters not an object schema", file(`{"name":"c","type":"client","description":"d","parameters":{"type":"string"}}`), false, "/tools/0/parameters/type", "c", "object"},
		{"parameters do not compile", file(`{"name":"c","type":"client","description":"d","parameters":{"type":"object","properties":{"a":{"type":"nope"}}}}`), false, "/tools/0/parameters", "c", "compile"},
		{"result schema does not compile", file(`{"name":"c","type":"client","description":"d","result_schema":{"type":5}}`), false, "/tools/0/result_schema", "c", "compile"},
		{"gated human tool", file(`{"name":"h","type":"human","description":"d","approval":"requires_approval"}`), false, "/tools/0/approval", "h", "auto"},
		{"duplicate names", file(`{"name":"c","type":"client","description":"d"}`, `{"name":"c","type":"client","description":"d"}`), false, "/tools/1/name", "c", "already used"},

		{"webhook secret unset", file(strings.Replace(webhook(""), "TICKET_WEBHOOK_SECRET", "UNSET_SECRET", 1)), false, "/tools/0/secret_env", "hook", "UNSET_SECRET"},
		{"webhook without secret_env", file(`{"name":"hook","type":"webhook","description":"d","url":"https://hooks.example.test/x"}`), false, "/tools/0", "hook", "secret_env"},
		{"webhook plain http in production", file(strings.Replace(webhook(""), "https://", "http://", 1)), true, "/tools/0/url", "hook", "https"},
		{"webhook loopback", file(strings.Replace(webhook(""), "hooks.example.test", "127.0.0.1:9000", 1)), false, "/tools/0/url", "hook", "allow_private_network"},
		{"webhook localhost", file(strings.Replace(webhook(""), "hooks.example.test", "localhost", 1)), false, "/tools/0/url", "hook", "allow_private_network"},
		{"webhook metadata address", file(strings.Replace(webhook(""), "hooks.example.test", "169.254.169.254", 1)), false, "/tools/0/url", "hook", "allow_private_network"},
		{"webhook reserved header", file(webhook(`,"headers":{"X-Webhook-Signature":"x"}`)), false, "/tools/0/headers", "hook", "set by the webhook"},
		{"webhook secret header", file(webhook(`,"headers":{"Authorization":"Bearer x"}`)), false, "/tools/0/headers", "hook", "secrets"},
		{"webhook GET", file(webhook(`,"method":"GET"`)), false, "/tools/0/method", "hook", "POST"},
		{"webhook too many retries", file(webhook(`,"max_retries":11`)), false, "/tools/0/max_retries", "hook", "<= 10"},

		{"http without allowed_hosts", file(`{"name":"web","type":"http","description":"d","request":` + get + `}`), false, "/tools/0", "web", "allowed_hosts"},
		{"http empty allowed_hosts", file(strings.Replace(httpTool(get, ""), `["api.example.test"]`, `[]`, 1)), false, "/tools/0/allowed_hosts", "web", "minimum"},
		{"http host not allowed", file(httpTool(`{"method":"GET","url_template":"https://evil.example.test/{{ city }}"}`, "")), false, "/tools/0/request/url_template", "web", "allowed_hosts"},
		{"http placeholder in host", file(httpTool(`{"method":"GET","url_template":"https://{{ city }}.example.test/"}`, "")), false, "/tools/0/request/url_template", "web", "only in the path"},
		{"http query string", file(httpTool(`{"method":"GET","url":"https://api.example.test/w?city=x"}`, "")), false, "/tools/0/request/url", "web", "query_params"},
		{"http userinfo", file(httpTool(`{"method":"GET","url":"https://u:p@api.example.test/w"}`, "")), false, "/tools/0/request/url", "web", "userinfo"},
		{"http url and template", file(httpTool(`{"method":"GET","url":"https://api.example.test/w","url_template":"https://api.example.test/{{ city }}"}`, "")), false, "/tools/0/request", "web", "not both"},
		{"http Authorization header", file(httpTool(`{"method":"GET","url":"https://api.example.test/w","headers":{"Authorization":"Bearer x"}}`, "")), false, "/tools/0/request/headers/Authorization", "web", "credential_refs"},
		{"http secret json key", file(httpTool(`{"method":"POST","url":"https://api.example.test/w","json":{"auth":{"password":"x"}}}`, "")), false, "/tools/0/request/json/auth/password", "web", "secrets"},
		{"http secret query key", file(httpTool(`{"method":"GET","url":"https://api.example.test/w","query_params":{"token":"x"}}`, "")), false, "/tools/0/request/query_params/token", "web", "secrets"},
		{"http raw body", file(httpTool(`{"method":"POST","url":"https://api.example.test/w","body":"x"}`, "")), false, "/tools/0/request/body", "web", "allow_body"},
		{"http unknown request key", file(httpTool(`{"method":"GET","url":"https://api.example.test/w","follow":true}`, "")), false, "/tools/0/request", "web", "follow"},
		{"http undeclared placeholder", file(httpTool(`{"method":"GET","url_template":"https://api.example.test/w/{{ town }}"}`, "")), false, "/tools/0/request", "web", "{{ town }} is not a property"},
		{"http host with port", file(strings.Replace(httpTool(get, ""), `["api.example.test"]`, `["api.example.test:443"]`, 1)), false, "/tools/0/allowed_hosts/0", "web", "pattern"},

		{"go unknown adapter", file(`{"name":"g","type":"go","adapter":"billing.nope"}`), false, "/tools/0/adapter", "g", "unknown adapter"},
		{"go disabled adapter", file(`{"name":"g","type":"go","adapter":"billing.disabled","description":"d"}`), false, "/tools/0/adapter", "g", "disabled"},
		{"go malformed key", file(`{"name":"g","type":"go","adapter":"Billing/Load"}`), false, "/tools/0/adapter", "g", "pattern"},
		{"go without adapter", file(`{"name":"g","type":"go","description":"d"}`), false, "/tools/0", "g", "adapter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := env(t)
			e.Production = tc.production
			ts, err := Parse(tc.data, e)
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Parse = %d tools, %v; want a file error", len(ts), err)
			}
			if ts != nil {
				t.Fatal("tools returned beside an error")
			}
			for _, p := range fe.Problems {
				if p.Path == tc.path && p.Tool == tc.tool && strings.Contains(p.Message, tc.message) {
					return
				}
			}
			t.Fatalf("problems:\n%v\nwant one at %q for tool %q mentioning %q", fe, tc.path, tc.tool, tc.message)
		})
	}
}

func TestGoToolWithoutRegistry(t *testing.T) {
	_, err := Parse(file(`{"name":"g","type":"go","adapter":"billing.load_invoice"}`), Env{})
	var fe *Error
	if !errors.As(err, &fe) || fe.Problems[0].Path != "/tools/0/adapter" {
		t.Fatalf("no registry: %v", err)
	}
}

// TestEveryProblemAtOnce: one load reports every broken tool, each by path and name.
func TestEveryProblemAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tools.json")
	data := file(
		`{"name":"ok","type":"client","description":"d"}`,
		`{"name":"hook","type":"webhook","description":"d","url":"http://localhost/x","secret_env":"NOPE"}`,
		`{"name":"web","type":"http","description":"d","request":{"method":"GET","url":"https://x.example.test/a?b=1"},"allowed_hosts":["y.example.test"]}`,
		`{"name":"g","type":"go","adapter":"billing.nope","extra":true}`,
	)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path, env(t))
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("Load = %v", err)
	}
	want := []string{
		`/tools/1/secret_env (tool "hook")`,
		`/tools/1/url (tool "hook")`,
		`/tools/2/request/url (tool "web")`,
		`/tools/3/extra (tool "g")`,
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, path+":") {
		t.Errorf("the error does not name the file: %s", msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %s:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, `"ok"`) {
		t.Errorf("a valid tool was reported:\n%s", msg)
	}
}

// TestWebhookToolEndToEnd loads a webhook tool pointing at a test receiver, runs it as the
// agent would and verifies the request with the Standard Webhooks reference library.
func TestWebhookToolEndToEnd(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("e2e-key"))
	ref, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := ref.Verify(body, r.Header); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var p struct {
			Arguments map[string]any `json:"arguments"`
		}
		_ = json.Unmarshal(body, &p)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ticket":"T-%s","key":%q}`, p.Arguments["city"], r.Header.Get("Idempotency-Key"))
	}))
	t.Cleanup(srv.Close)
	data := file(`{"name":"hook","type":"webhook","description":"d",` + params + `,"url":"` + srv.URL + `/in","secret_env":"HOOK_SECRET","allow_private_network":true,"timeout_secs":5,"max_retries":2}`)
	ts, err := Parse(data, Env{Getenv: func(string) string { return secret }})
	if err != nil {
		t.Fatal(err)
	}
	tl := ts[0]
	if tl.MaxAttempts() != 3 || tl.Timeout() != 5*time.Second {
		t.Fatalf("attempts %d timeout %v", tl.MaxAttempts(), tl.Timeout())
	}
	args, verr := tl.ValidateArgs(json.RawMessage(`{"city":"Oslo"}`))
	if verr != nil {
		t.Fatal(verr)
	}
	call := tools.Call{ToolCallID: "call_e2e", ConversationID: "conv"}
	o := tl.Execute(context.Background(), call, args)
	if o.Status != tools.OK {
		t.Fatalf("outcome %+v", o)
	}
	if m := o.Result.(map[string]any); m["ticket"] != "T-Oslo" || m["key"] != call.Key() {
		t.Fatalf("result %v", m)
	}
}

// TestHTTPToolEndToEnd loads an http tool, checks the client policy the loader asked for, and
// runs it against a test server with a resolved credential.
func TestHTTPToolEndToEnd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer cred-weather" {
			w.WriteHeader(401)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"city":%q,"units":%q}`, r.URL.Path, r.URL.Query().Get("units"))
	}))
	t.Cleanup(srv.Close)
	var policies []httpadapter.DialPolicy
	e := env(t)
	e.HTTPClient = func(p httpadapter.DialPolicy) *http.Client {
		policies = append(policies, p)
		return httpadapter.NewClient(p)
	}
	data := file(`{"name":"weather","type":"http","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"},"units":{"type":"string"}},"required":["city","units"]},
		"request":{"method":"GET","url_template":"` + srv.URL + `/weather/{{ city }}","query_params":{"units":"{{ units }}"},"credential_refs":["weather"]},
		"allowed_hosts":["127.0.0.1","api.example.test"],"persist_response_body":true,"max_retries":1}`)
	ts, err := Parse(data, e)
	if err != nil {
		t.Fatal(err)
	}
	if len(policies) != 1 || strings.Join(policies[0].PrivateHosts, ",") != "127.0.0.1" || policies[0].AllowPrivateNetwork {
		t.Fatalf("dial policies %+v: only the private literal is exempt", policies)
	}
	tl := ts[0]
	args, verr := tl.ValidateArgs(json.RawMessage(`{"city":"New York","units":"metric"}`))
	if verr != nil {
		t.Fatal(verr)
	}
	if !tl.HasPrecheck() || tl.Precheck(context.Background(), args) != nil {
		t.Fatal("an http tool from the file must carry a precheck that passes a good call")
	}
	if e := tl.Precheck(context.Background(), map[string]any{"city": "..", "units": "metric"}); e == nil || e.Kind != fault.KindInvalidArgs {
		t.Fatalf("precheck of a traversing segment: %v, want invalid_args", e)
	}
	o := tl.Execute(context.Background(), tools.Call{ToolCallID: "c1"}, args)
	if o.Status != tools.OK {
		t.Fatalf("outcome %+v", o)
	}
	resp := o.Result.(map[string]any)["http_response"].(map[string]any)
	body := resp["body"].(map[string]any)
	if resp["status"] != 200 || body["city"] != "/weather/New York" || body["units"] != "metric" {
		t.Fatalf("response %v", resp)
	}
	enc, _ := json.Marshal(o.Result)
	if strings.Contains(string(enc), "cred-weather") {
		t.Fatal("credential leaked into the result")
	}
	plan, err := tl.DryRun(context.Background(), tools.Call{}, args)
	if err != nil || !strings.Contains(plan.Summary, "GET "+srv.URL+"/weather/New%20York?units=metric") {
		t.Fatalf("dry run %+v %v", plan, err)
	}
}

// TestGoToolResolvedAtExecution: the tools file names a key; disabling it afterwards refuses
// the next call.
func TestGoToolResolvedAtExecution(t *testing.T) {
	e := env(t)
	ts, err := Parse(file(`{"name":"inv","type":"go","adapter":"billing.load_invoice","description":"Invoices.",`+
		`"parameters":{"type":"object","properties":{"invoice_id":{"type":"string"}}}}`), e)
	if err != nil {
		t.Fatal(err)
	}
	o := ts[0].Execute(context.Background(), tools.Call{ToolCallID: "c"}, map[string]any{"invoice_id": "inv_1"})
	if o.Status != tools.OK || o.Result.(map[string]any)["total"] != int64(120) {
		t.Fatalf("outcome %+v", o)
	}
	if ts[0].Precheck(context.Background(), nil) != nil {
		t.Fatal("precheck refused an enabled adapter")
	}
	if err := e.Adapters.SetEnabled("billing.load_invoice", false); err != nil {
		t.Fatal(err)
	}
	if pe := ts[0].Precheck(context.Background(), nil); pe == nil || pe.Kind != fault.KindPermissionDenied {
		t.Fatalf("precheck of a disabled adapter: %v, want permission_denied", pe)
	}
	o = ts[0].Execute(context.Background(), tools.Call{ToolCallID: "c"}, map[string]any{"invoice_id": "inv_1"})
	if o.Status != tools.ToolError || o.Err.Kind != fault.KindPermissionDenied {
		t.Fatalf("disabled: %+v", o)
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "none.json"), Env{}); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load = %v", err)
	}
}

// FuzzParse: any input yields either tools or a file error whose problems all carry a JSON
// pointer, never a panic; tools come back only when every tool of the file was built.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(examplePath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(`{"tools":[]}`))
	f.Add(file(`{"name":"web","type":"http","description":"d","request":{"method":"GET","url_template":"https://a.test/{{ x }}"},"allowed_hosts":["a.test"]}`))
	f.Add(file(`{"name":"hook","type":"webhook","description":"d","url":"https://h.test/","secret_env":"TICKET_WEBHOOK_SECRET","headers":{"a":"b"}}`))
	f.Add(file(`{"name":"g","type":"go","adapter":"billing.load_invoice"}`, `{"name":"h","type":"human","description":"q","response_schema":{"type":"object"}}`))
	e := env(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, err := Parse(data, e)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("non-file error: %v", err)
			}
			if len(fe.Problems) == 0 {
				t.Fatal("a file error without problems")
			}
			for _, p := range fe.Problems {
				if p.Path != "" && !strings.HasPrefix(p.Path, "/") {
					t.Fatalf("problem path %q is not a JSON pointer", p.Path)
				}
				if p.Message == "" {
					t.Fatal("a problem without a message")
				}
			}
			return
		}
		var doc struct {
			Tools []json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("accepted a file that does not decode: %v", err)
		}
		if len(ts) != len(doc.Tools) {
			t.Fatalf("%d tools built of %d", len(ts), len(doc.Tools))
		}
	})
}
