package httpadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"parley/internal/fault"
	"parley/internal/tools"
)

func decodeMap(t *testing.T, s string) map[string]any {
	t.Helper()
	v, err := tools.DecodeJSON([]byte(s))
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return v.(map[string]any)
}

var policy = ActionOptions{AllowedHosts: []string{"api.example.test"}}

// TestActionRefusals lists every refusal of the http.request action; each case names the
// problem's path and a word of its message, so removing a rule fails its row.
func TestActionRefusals(t *testing.T) {
	resolver := CredentialResolverFunc(func(context.Context, string) (http.Header, error) { return nil, nil })
	tests := []struct {
		name    string
		req     string
		opts    ActionOptions
		path    string
		message string
	}{
		{"userinfo", `{"method":"GET","url":"https://u:p@api.example.test/x"}`, policy, "/url", "userinfo"},
		{"query string in url", `{"method":"GET","url":"https://api.example.test/x?a=1"}`, policy, "/url", "query string"},
		{"query string in template", `{"method":"GET","url_template":"https://api.example.test/{{ a }}?b=1"}`, policy, "/url_template", "query string"},
		{"placeholder in host", `{"method":"GET","url_template":"https://{{ a }}.example.test/"}`, policy, "/url_template", "only in the path"},
		{"placeholder in fixed url", `{"method":"GET","url":"https://api.example.test/{{ a }}"}`, policy, "/url", "url_template"},
		{"host not allowed", `{"method":"GET","url":"https://evil.example.test/x"}`, policy, "/url", "not in allowed_hosts"},
		{"template host not allowed", `{"method":"GET","url_template":"https://evil.example.test/{{ a }}"}`, policy, "/url_template", "not in allowed_hosts"},
		{"allowed_hosts missing", `{"method":"GET","url":"https://api.example.test/x"}`, ActionOptions{}, "", "allowed_hosts is required"},
		{"Authorization header", `{"method":"GET","url":"https://api.example.test/x","headers":{"Authorization":"Bearer x"}}`, policy, "/headers/Authorization", "credential_refs"},
		{"Cookie header", `{"method":"GET","url":"https://api.example.test/x","headers":{"cookie":"a=b"}}`, policy, "/headers/cookie", "secrets"},
		{"Proxy-Authorization header", `{"method":"GET","url":"https://api.example.test/x","headers":{"Proxy-Authorization":"x"}}`, policy, "/headers/Proxy-Authorization", "secrets"},
		{"X-Api-Key header", `{"method":"GET","url":"https://api.example.test/x","headers":{"X-Api-Key":"k"}}`, policy, "/headers/X-Api-Key", "secrets"},
		{"X-Auth-Token header", `{"method":"GET","url":"https://api.example.test/x","headers":{"X-Auth-Token":"k"}}`, policy, "/headers/X-Auth-Token", "secrets"},
		{"credential under an innocent name", `{"method":"GET","url":"https://api.example.test/x","headers":{"X-Custom":"Bearer sk-123"}}`, policy, "/headers/X-Custom", "secrets"},
		{"basic credential under an innocent name", `{"method":"GET","url":"https://api.example.test/x","headers":{"X-Upstream":"basic dXNlcjpwdw=="}}`, policy, "/headers/X-Upstream", "secrets"},
		{"passphrase payload key", `{"method":"POST","url":"https://api.example.test/x","json":{"passphrase":"x"}}`, policy, "/json/passphrase", "secrets"},
		{"Host header", `{"method":"GET","url":"https://api.example.test/x","headers":{"Host":"evil.test"}}`, policy, "/headers/Host", "transport"},
		{"header injection", `{"method":"GET","url":"https://api.example.test/x","headers":{"X-A":"a\r\nX-B: b"}}`, policy, "/headers/X-A", "not a valid header"},
		{"placeholder in header", `{"method":"GET","url":"https://api.example.test/x","headers":{"X-A":"{{ a }}"}}`, policy, "/headers/X-A", "fixed"},
		{"password payload key", `{"method":"POST","url":"https://api.example.test/x","json":{"user":{"password":"x"}}}`, policy, "/json/user/password", "secrets"},
		{"api_key payload key", `{"method":"POST","url":"https://api.example.test/x","json":[{"api_key":"x"}]}`, policy, "/json/0/api_key", "secrets"},
		{"token payload key", `{"method":"POST","url":"https://api.example.test/x","json":{"access_token":"x"}}`, policy, "/json/access_token", "secrets"},
		{"client_secret payload key", `{"method":"POST","url":"https://api.example.test/x","json":{"client_secret":"x"}}`, policy, "/json/client_secret", "secrets"},
		{"secret query key", `{"method":"GET","url":"https://api.example.test/x","query_params":{"api_key":"x"}}`, policy, "/query_params/api_key", "secrets"},
		{"raw body without allow_body", `{"method":"POST","url":"https://api.example.test/x","body":"raw"}`, policy, "/body", "allow_body"},
		{"body and json", `{"method":"POST","url":"https://api.example.test/x","body":"raw","json":{}}`, ActionOptions{AllowedHosts: policy.AllowedHosts, AllowBody: true}, "/body", "not both"},
		{"url and template", `{"method":"GET","url":"https://api.example.test/x","url_template":"https://api.example.test/{{ a }}"}`, policy, "", "not both"},
		{"no url", `{"method":"GET"}`, policy, "", "required"},
		{"no method", `{"url":"https://api.example.test/x"}`, policy, "/method", "required"},
		{"bad method", `{"method":"TRACE","url":"https://api.example.test/x"}`, policy, "/method", "method"},
		{"unknown key", `{"method":"GET","url":"https://api.example.test/x","follow_redirects":true}`, policy, "/follow_redirects", "unknown"},
		{"query_params and params", `{"method":"GET","url":"https://api.example.test/x","params":{"a":"1"},"query_params":{"b":"2"}}`, policy, "/query_params", "not both"},
		{"non-scalar query value", `{"method":"GET","url":"https://api.example.test/x","params":{"a":{"b":1}}}`, policy, "/params/a", "string"},
		{"malformed query placeholder", `{"method":"GET","url":"https://api.example.test/x","params":{"a":"{{ b"}}`, policy, "/params/a", "malformed"},
		{"timeout too long", `{"method":"GET","url":"https://api.example.test/x","timeout":1000}`, policy, "/timeout", "timeout"},
		{"credential ref without resolver", `{"method":"GET","url":"https://api.example.test/x","credential_refs":["crm"]}`, policy, "/credential_refs", "resolver"},
		{"bad credential ref", `{"method":"GET","url":"https://api.example.test/x","credential_refs":["a b"]}`, ActionOptions{AllowedHosts: policy.AllowedHosts, Credentials: resolver}, "/credential_refs/0", "credential reference"},
		{"ftp", `{"method":"GET","url":"ftp://api.example.test/x"}`, policy, "/url", "http"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ValidateRequestWithPolicy(decodeMap(t, tc.req), tc.opts)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("accepted (err %v)", err)
			}
			for _, p := range ve.Problems {
				if p.Path == tc.path && strings.Contains(p.Message, tc.message) {
					return
				}
			}
			t.Fatalf("problems %+v; want one at %q mentioning %q", ve.Problems, tc.path, tc.message)
		})
	}
}

func TestActionAccepts(t *testing.T) {
	resolver := CredentialResolverFunc(func(context.Context, string) (http.Header, error) { return nil, nil })
	tests := []struct {
		name string
		req  string
		opts ActionOptions
	}{
		{"template with query placeholders", `{"method":"GET","url_template":"https://api.example.test/w/{{ city }}","query_params":{"units":"{{ units }}","max_tokens":5}}`, policy},
		{"raw body with allow_body", `{"method":"POST","url":"https://api.example.test/x","body":"a={{ a }}"}`, ActionOptions{AllowedHosts: policy.AllowedHosts, AllowBody: true}},
		{"credential refs with resolver", `{"method":"GET","url":"https://API.example.test/x","credential_refs":["crm"]}`, ActionOptions{AllowedHosts: policy.AllowedHosts, Credentials: resolver}},
		{"harmless headers", `{"method":"GET","url":"https://api.example.test/x","headers":{"Accept":"application/json","X-Request-Source":"parley"}}`, policy},
	}
	for _, tc := range tests {
		if _, err := ValidateRequestWithPolicy(decodeMap(t, tc.req), tc.opts); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// Structure alone does not need a policy.
	if _, err := ValidateRequest(decodeMap(t, `{"method":"GET","url":"https://anywhere.example.test/x"}`)); err != nil {
		t.Errorf("ValidateRequest: %v", err)
	}
	if _, err := ValidateRequest(decodeMap(t, `{"method":"GET","url":"https://a.example.test/x","headers":{"Authorization":"x"}}`)); err == nil {
		t.Error("ValidateRequest accepted a secret header")
	}
}

func TestValidateActionInput(t *testing.T) {
	req := decodeMap(t, `{"method":"POST","url_template":"https://api.example.test/c/{{ id }}","json":{"note":"{{ note }}"}}`)
	if err := ValidateActionInput(req, map[string]any{"id": "7", "note": "hi"}, policy); err != nil {
		t.Fatalf("valid input refused: %v", err)
	}
	for name, b := range map[string]map[string]any{
		"missing binding":                 {"id": "7"},
		"path traversal":                  {"id": "..", "note": "x"},
		"secret key smuggled by an arg":   {"id": "7", "note": map[string]any{"password": "x"}},
		"object where a segment is typed": {"id": map[string]any{}, "note": "x"},
	} {
		if err := ValidateActionInput(req, b, policy); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestActionFunc(t *testing.T) {
	type seen struct {
		path, query, auth, body, idem string
	}
	got := make(chan seen, 4)
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization"), string(b), r.Header.Get("Idempotency-Key")}
		w.Header().Set("Set-Cookie", "sid=1")
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.URL.Path, "fail") {
			w.WriteHeader(503)
			fmt.Fprint(w, `{"error":"down"}`)
			return
		}
		fmt.Fprint(w, `{"id":"n1","text":"`+strings.Repeat("a", 100)+`"}`)
	})
	resolver := CredentialResolverFunc(func(ctx context.Context, ref string) (http.Header, error) {
		return http.Header{"Authorization": {"Bearer hidden-value"}}, nil
	})
	req := decodeMap(t, `{"method":"POST","url_template":"`+srv.URL+`/c/{{ id }}/notes","query_params":{"v":"{{ v }}"},"json":{"text":"{{ text }}","n":"{{ n }}"},"credential_refs":["crm"]}`)
	build := func(persist bool, max int) *Action {
		a, err := NewAction(req, ActionOptions{AllowedHosts: []string{"127.0.0.1"}, Credentials: resolver, PersistResponseBody: persist, MaxBodyBytes: max})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	call := tools.Call{ToolCallID: "call_9", ConversationID: "c1"}
	args := map[string]any{"id": "a?b c", "v": "x&y=1", "text": "hello", "n": int64(3)}

	out, err := build(false, 0).Func()(context.Background(), call, args)
	if err != nil {
		t.Fatalf("Func: %v", err)
	}
	s := <-got
	if s.path != "/c/a%3Fb%20c/notes" || s.query != "v=x%26y%3D1" || s.auth != "Bearer hidden-value" || s.idem != call.Key() {
		t.Errorf("server saw %+v", s)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(s.body), &body); err != nil || body["text"] != "hello" || body["n"] != float64(3) {
		t.Errorf("server body %s: the exact placeholder must keep the number type", s.body)
	}
	resp := out.(map[string]any)["http_response"].(map[string]any)
	if resp["status"] != 200 || resp["headers"].(map[string]any)["set-cookie"] != Redacted {
		t.Errorf("response %v", resp)
	}
	if _, has := resp["body"]; has {
		t.Errorf("body kept without persist_response_body: %v", resp)
	}
	enc, _ := json.Marshal(out)
	if strings.Contains(string(enc), "hidden-value") {
		t.Fatal("credential value leaked into the result")
	}

	out, err = build(true, 40).Func()(context.Background(), call, args)
	if err != nil {
		t.Fatal(err)
	}
	<-got
	resp = out.(map[string]any)["http_response"].(map[string]any)
	if b, _ := resp["body"].(string); len(b) != 40 || resp["body_truncated"] != true {
		t.Errorf("persisted body %q truncated %v, want 40 bytes", b, resp["body_truncated"])
	}

	args["id"] = "fail"
	_, err = build(false, 0).Func()(context.Background(), call, args)
	<-got
	var te *fault.Error
	if !errors.As(err, &te) || te.Kind != fault.KindHTTPError || !te.Retryable {
		t.Fatalf("503: %v, want a retryable http_error", err)
	}
	if _, has := te.Details["body"]; has {
		t.Errorf("error body kept without persist_response_body: %v", te.Details)
	}

	_, err = build(false, 0).Func()(context.Background(), call, map[string]any{"id": ".."})
	if !errors.As(err, &te) || te.Kind != fault.KindInvalidArgs {
		t.Fatalf("bad args: %v, want invalid_args", err)
	}

	plan, err := build(false, 0).DryRun()(context.Background(), call, map[string]any{"id": "7", "v": "1", "text": "t", "n": int64(1)})
	if err != nil || !strings.Contains(plan.Summary, "POST "+srv.URL+"/c/7/notes?v=1") {
		t.Fatalf("plan %+v, %v", plan, err)
	}
}

func TestActionRefusesPrivateResolution(t *testing.T) {
	// "localhost" is listed, but the policy dials a listed name only when it is private on its
	// face; here the name is "localhost" so it is exempt, while 127.0.0.1 is not listed.
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {})
	port := mustURL(t, srv.URL).Port()
	a, err := NewAction(map[string]any{"method": "GET", "url": "http://localhost:" + port + "/"}, ActionOptions{AllowedHosts: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Func()(context.Background(), tools.Call{ToolCallID: "c"}, nil); err != nil {
		t.Fatalf("listed localhost refused: %v", err)
	}
	p := DialPolicyFor(ActionOptions{AllowedHosts: []string{"api.example.test", "127.0.0.1", "localhost"}})
	if strings.Join(p.PrivateHosts, ",") != "127.0.0.1,localhost" {
		t.Fatalf("PrivateHosts = %v: a public-looking name must stay checked at dial time", p.PrivateHosts)
	}
}

// TestActionPrecheck: the per-attempt check passes a good call and refuses, without sending
// anything, a call whose expansion fails or leaves the policy, with the kind the loop records.
func TestActionPrecheck(t *testing.T) {
	req := decodeMap(t, `{"method":"POST","url_template":"https://api.example.test/c/{{ id }}","json":{"note":"{{ note }}"}}`)
	a, err := NewAction(req, ActionOptions{AllowedHosts: []string{"api.example.test"}, Client: &http.Client{Transport: refuseTransport{t}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Precheck(context.Background(), map[string]any{"id": "7", "note": "hi"}); err != nil {
		t.Fatalf("valid call refused: %v", err)
	}
	for name, c := range map[string]struct {
		args map[string]any
		kind fault.Kind
	}{
		"missing binding":               {map[string]any{"id": "7"}, fault.KindInvalidArgs},
		"path traversal":                {map[string]any{"id": "..", "note": "x"}, fault.KindInvalidArgs},
		"secret key smuggled by an arg": {map[string]any{"id": "7", "note": map[string]any{"api_key": "x"}}, fault.KindInvalidArgs},
	} {
		err := a.Precheck(context.Background(), c.args)
		var te *fault.Error
		if !errors.As(err, &te) || te.Kind != c.kind {
			t.Errorf("%s: Precheck = %v, want %s", name, err, c.kind)
		}
	}

	// The policy is checked again: an action whose host left allowed_hosts is blocked.
	moved := &Action{req: a.req, opts: ActionOptions{AllowedHosts: []string{"other.example.test"}}}
	var te *fault.Error
	if err := moved.Precheck(context.Background(), map[string]any{"id": "7", "note": "x"}); !errors.As(err, &te) || te.Kind != fault.KindBlockedHost {
		t.Fatalf("host outside allowed_hosts: %v, want blocked_host", err)
	}
	if err := (&Action{}).Precheck(context.Background(), nil); err == nil || errors.As(err, &te) {
		t.Fatalf("zero Action: %v, want an internal error", err)
	}
}

// refuseTransport fails the test if anything is sent.
type refuseTransport struct{ t *testing.T }

func (r refuseTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.t.Errorf("a precheck sent %s %s", req.Method, req.URL)
	return nil, errors.New("refused")
}

// TestActionRedactsPersistedBodies: a persisted JSON body (success or error) keeps its data but
// not the secrets it carries, so an OAuth-style answer never puts a token in the log.
func TestActionRedactsPersistedBodies(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/fail") {
			w.WriteHeader(400)
			fmt.Fprint(w, `{"error":"bad","client_secret":"cs-err-1"}`)
			return
		}
		fmt.Fprint(w, `{"access_token":"tok-ok-1","expires_in":3600,"items":[{"name":"a","refresh_token":"rt-1"}]}`)
	})
	a, err := NewAction(decodeMap(t, `{"method":"POST","url_template":"`+srv.URL+`/{{ p }}"}`),
		ActionOptions{AllowedHosts: []string{"127.0.0.1"}, PersistResponseBody: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Func()(context.Background(), tools.Call{ToolCallID: "c"}, map[string]any{"p": "ok"})
	if err != nil {
		t.Fatal(err)
	}
	body := out.(map[string]any)["http_response"].(map[string]any)["body"].(map[string]any)
	enc, _ := json.Marshal(out)
	if strings.Contains(string(enc), "tok-ok-1") || strings.Contains(string(enc), "rt-1") || body["expires_in"] != int64(3600) || body["access_token"] != Redacted {
		t.Fatalf("persisted body %s: want the tokens redacted and the rest kept", enc)
	}
	_, err = a.Func()(context.Background(), tools.Call{ToolCallID: "c"}, map[string]any{"p": "fail"})
	var te *fault.Error
	if !errors.As(err, &te) {
		t.Fatalf("400: %v", err)
	}
	enc, _ = json.Marshal(te.Details)
	if strings.Contains(string(enc), "cs-err-1") || !strings.Contains(string(enc), `"bad"`) {
		t.Fatalf("error details %s: want the secret redacted and the message kept", enc)
	}
}

// TestSlashInPathNeedsOptIn: a path value holding "/" is refused unless the tool allows it (the
// tools file's allow_slash_in_path); allowed, it fills segments that still cannot walk up.
func TestSlashInPathNeedsOptIn(t *testing.T) {
	req := map[string]any{"method": "GET", "url_template": "https://api.example.test/files/{{ path }}"}
	strict := ActionOptions{AllowedHosts: []string{"api.example.test"}}
	if err := ValidateActionInput(req, map[string]any{"path": "a/b"}, strict); err == nil || !strings.Contains(err.Error(), "allow_slash_in_path") {
		t.Fatalf("a slash without the opt-in: %v", err)
	}
	open := strict
	open.AllowSlashInPath = true
	r, err := ValidateRequestWithPolicy(req, open)
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Build(map[string]any{"path": "docs/read me.txt"})
	if err != nil || out.URL != "https://api.example.test/files/docs/read%20me.txt" {
		t.Fatalf("with the opt-in: %q, %v", out.URL, err)
	}
	if _, err := r.Build(map[string]any{"path": "docs/../../etc/passwd"}); err == nil {
		t.Fatal("a walk up was accepted with the opt-in")
	}
}
