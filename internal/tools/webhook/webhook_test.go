package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/tools"
	"parley/internal/tools/httpadapter"
)

// received is one request as the receiving end saw it.
type received struct {
	header http.Header
	body   []byte
}

// receiver answers with the next response of answers (repeating the last) and reports each
// request on a buffered channel.
func receiver(t *testing.T, answers ...func(w http.ResponseWriter)) (*httptest.Server, <-chan received) {
	t.Helper()
	ch := make(chan received, 16)
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- received{r.Header.Clone(), b}
		a := answers[min(n, len(answers)-1)]
		n++
		a(w)
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

func status(code int, headers ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(code)
	}
}

func jsonAnswer(body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}
}

func newHook(t *testing.T, url string, secret string, clk clock.Clock, mod ...func(*Config)) *Webhook {
	t.Helper()
	key, err := DecodeSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Tool: "create_ticket", URL: url, Secret: key, Clock: clk, AllowPrivateNetwork: true, Headers: map[string]string{"X-Source": "parley"}}
	for _, m := range mod {
		m(&cfg)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestSignaturesVerifyWithReferenceLibrary proves the Standard Webhooks headers with the
// reference Go library of the spec, for a whsec_ secret and a raw one, and the hex HMAC with
// crypto/hmac.
func TestSignaturesVerifyWithReferenceLibrary(t *testing.T) {
	rawKey := []byte("0123456789abcdef0123456789abcdef")
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(rawKey)
	for _, tc := range []struct {
		name     string
		secret   string
		verifier func() (*standardwebhooks.Webhook, error)
		key      []byte
	}{
		{"whsec secret", whsec, func() (*standardwebhooks.Webhook, error) { return standardwebhooks.NewWebhook(whsec) }, rawKey},
		{"raw secret", "plain-shared-secret", func() (*standardwebhooks.Webhook, error) {
			return standardwebhooks.NewWebhookRaw([]byte("plain-shared-secret"))
		}, []byte("plain-shared-secret")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, got := receiver(t, jsonAnswer(`{"ticket":"T-1"}`))
			now := time.Now().Truncate(time.Second)
			w := newHook(t, srv.URL, tc.secret, clock.NewFake(now))
			args := map[string]any{"title": "Printer", "body": "jammed"}
			call := tools.Call{ToolCallID: "call_abc", ConversationID: "conv_1"}
			res, err := w.Func()(context.Background(), call, args)
			if err != nil {
				t.Fatalf("Func: %v", err)
			}
			if m, ok := res.(map[string]any); !ok || m["ticket"] != "T-1" {
				t.Fatalf("result = %#v, want the JSON answer", res)
			}
			r := <-got
			ref, err := tc.verifier()
			if err != nil {
				t.Fatal(err)
			}
			if err := ref.Verify(r.body, r.header); err != nil {
				t.Fatalf("reference verifier refused the signature: %v", err)
			}
			tampered := append([]byte(nil), r.body...)
			tampered[len(tampered)-2] ^= 1
			if err := ref.Verify(tampered, r.header); err == nil {
				t.Fatal("reference verifier accepted a tampered body")
			}
			// The legacy signature covers the timestamp too: "<webhook-timestamp>.<body>".
			m := hmac.New(sha256.New, tc.key)
			m.Write([]byte(r.header.Get("webhook-timestamp") + "."))
			m.Write(r.body)
			if want := "sha256=" + hex.EncodeToString(m.Sum(nil)); r.header.Get("X-Webhook-Signature") != want {
				t.Fatalf("X-Webhook-Signature = %q, want %q", r.header.Get("X-Webhook-Signature"), want)
			}
			// The body's signature alone (the old scheme) no longer verifies: a captured request
			// cannot be replayed with a fresh timestamp.
			old := hmac.New(sha256.New, tc.key)
			old.Write(r.body)
			if "sha256="+hex.EncodeToString(old.Sum(nil)) == r.header.Get("X-Webhook-Signature") {
				t.Fatal("X-Webhook-Signature signs the body without its timestamp")
			}
			key := call.Key()
			if r.header.Get("webhook-id") != key || r.header.Get("Idempotency-Key") != key ||
				r.header.Get("webhook-timestamp") != strconv.FormatInt(now.Unix(), 10) ||
				r.header.Get("Content-Type") != "application/json" || r.header.Get("X-Source") != "parley" {
				t.Fatalf("headers = %v", r.header)
			}
			var p map[string]any
			if err := json.Unmarshal(r.body, &p); err != nil {
				t.Fatal(err)
			}
			if p["tool_call_id"] != "call_abc" || p["conversation_id"] != "conv_1" || p["tool"] != "create_ticket" || p["arguments"].(map[string]any)["title"] != "Printer" || len(p) != 4 {
				t.Fatalf("payload = %v", p)
			}
		})
	}
}

// TestTimestampFromInjectedClock: the reference verifier refuses a timestamp outside its
// tolerance, and accepts it when told to ignore time, so the header comes from our clock.
func TestTimestampFromInjectedClock(t *testing.T) {
	srv, got := receiver(t, jsonAnswer(`{}`))
	past := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	w := newHook(t, srv.URL, "whsec_"+base64.StdEncoding.EncodeToString([]byte("k")), clock.NewFake(past))
	if _, err := w.Func()(context.Background(), tools.Call{ToolCallID: "c1"}, nil); err != nil {
		t.Fatal(err)
	}
	r := <-got
	ref, _ := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString([]byte("k")))
	if err := ref.Verify(r.body, r.header); !errors.Is(err, standardwebhooks.ErrMessageTooOld) {
		t.Fatalf("Verify = %v, want too old", err)
	}
	if err := ref.VerifyIgnoringTimestamp(r.body, r.header); err != nil {
		t.Fatalf("VerifyIgnoringTimestamp = %v", err)
	}
	if r.header.Get("webhook-timestamp") != strconv.FormatInt(past.Unix(), 10) {
		t.Fatalf("timestamp %s", r.header.Get("webhook-timestamp"))
	}
}

// TestRetrySemantics: the adapter sends once per call and reports what the loop's scheduler
// needs; across attempts of one call the idempotency key and webhook-id stay the same while the
// timestamp follows the clock.
func TestRetrySemantics(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	srv, got := receiver(t,
		status(429, "Retry-After", "7"),
		status(503, "Retry-After", start.Add(40*time.Second).Format(http.TimeFormat)),
		status(502),
		jsonAnswer(`{"ok":true}`),
	)
	w := newHook(t, srv.URL, "secret", clk)
	call := tools.Call{ToolCallID: "call_retry", ConversationID: "c"}
	wants := []struct {
		after time.Duration
	}{{7 * time.Second}, {40 * time.Second}, {0}}
	for i, want := range wants {
		call.Attempt = i + 1
		_, err := w.Func()(context.Background(), call, map[string]any{"n": int64(1)})
		var te *fault.Error
		if !errors.As(err, &te) || te.Kind != fault.KindHTTPError || !te.Retryable || te.RetryAfter != want.after {
			t.Fatalf("attempt %d: %+v, want retryable http_error after %v", i+1, err, want.after)
		}
		<-got
	}
	call.Attempt = 4
	clk.Advance(time.Minute)
	if _, err := w.Func()(context.Background(), call, map[string]any{"n": int64(1)}); err != nil {
		t.Fatalf("attempt 4: %v", err)
	}
	<-got
	if len(got) != 0 {
		t.Fatalf("%d extra requests: the adapter must not retry by itself", len(got))
	}
	// Two attempts of one call, seconds apart: same keys, fresh timestamp.
	srv2, got2 := receiver(t, status(500), jsonAnswer(`{}`))
	w2 := newHook(t, srv2.URL, "secret", clk)
	_, _ = w2.Func()(context.Background(), call, nil)
	clk.Advance(3 * time.Second)
	_, _ = w2.Func()(context.Background(), call, nil)
	a, b := <-got2, <-got2
	if a.header.Get("Idempotency-Key") != call.Key() || b.header.Get("Idempotency-Key") != call.Key() || a.header.Get("webhook-id") != b.header.Get("webhook-id") {
		t.Fatalf("keys differ across attempts: %v / %v", a.header, b.header)
	}
	if a.header.Get("webhook-timestamp") == b.header.Get("webhook-timestamp") {
		t.Fatal("each attempt is stamped with the clock's time")
	}
}

func TestAnswers(t *testing.T) {
	tests := []struct {
		name      string
		answer    func(http.ResponseWriter)
		want      any
		wantKind  fault.Kind
		retryable bool
	}{
		{"2xx JSON is the result", jsonAnswer(`{"a":[1,2]}`), map[string]any{"a": []any{int64(1), int64(2)}}, "", false},
		{"JSON without content type", func(w http.ResponseWriter) { fmt.Fprint(w, `["x"]`) }, []any{"x"}, "", false},
		{"empty 204", status(204), map[string]any{}, "", false},
		{"text 200", func(w http.ResponseWriter) { w.Header().Set("Content-Type", "text/plain"); fmt.Fprint(w, "done") }, map[string]any{"status": 200, "body": "done", "body_truncated": false}, "", false},
		{"400 is not retryable", status(400), nil, fault.KindHTTPError, false},
		{"422 is not retryable", status(422), nil, fault.KindHTTPError, false},
		{"302 is not followed and not success", status(302, "Location", "http://10.0.0.1/"), nil, fault.KindHTTPError, false},
		{"500 is retryable", status(500), nil, fault.KindHTTPError, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := receiver(t, tc.answer)
			res, err := newHook(t, srv.URL, "s", clock.Real{}).Func()(context.Background(), tools.Call{ToolCallID: "c"}, nil)
			if tc.wantKind == "" {
				if err != nil {
					t.Fatalf("err %v", err)
				}
				if fmt.Sprint(res) != fmt.Sprint(tc.want) {
					t.Fatalf("result %#v, want %#v", res, tc.want)
				}
				return
			}
			var te *fault.Error
			if !errors.As(err, &te) || te.Kind != tc.wantKind || te.Retryable != tc.retryable {
				t.Fatalf("err %+v, want %s retryable=%v", err, tc.wantKind, tc.retryable)
			}
			if enc, _ := json.Marshal(te); strings.Contains(string(enc), srv.URL) {
				t.Fatalf("the webhook URL reached the model: %s", enc)
			}
		})
	}
}

func TestTimeoutAndTransportErrors(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-block:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(block) })
	w := newHook(t, srv.URL, "s", nil, func(c *Config) { c.Timeout = 80 * time.Millisecond })
	_, err := w.Func()(context.Background(), tools.Call{ToolCallID: "c"}, nil)
	var te *fault.Error
	if !errors.As(err, &te) || te.Kind != fault.KindTimeout || !te.Retryable {
		t.Fatalf("timeout: %v, want retryable timeout", err)
	}

	closed := httptest.NewServer(http.NotFoundHandler())
	url := closed.URL
	closed.Close()
	_, err = newHook(t, url, "s", nil).Func()(context.Background(), tools.Call{ToolCallID: "c"}, nil)
	if !errors.As(err, &te) || te.Kind != fault.KindNetwork || !te.Retryable {
		t.Fatalf("connection refused: %v, want retryable network", err)
	}

	if _, err := newHook(t, url, "s", nil).Func()(context.Background(), tools.Call{}, nil); err == nil || errors.As(err, &te) {
		t.Fatalf("no tool_call_id: %v, want an internal error", err)
	}
}

func TestConfigRefusals(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"plain http in production", Config{URL: "http://hooks.example.test/x", Production: true}, "https"},
		{"loopback IP", Config{URL: "https://127.0.0.1/x"}, "allow_private_network"},
		{"localhost", Config{URL: "https://localhost:8443/x"}, "allow_private_network"},
		{"private IP", Config{URL: "https://10.0.0.5/x"}, "allow_private_network"},
		{"metadata IP", Config{URL: "http://169.254.169.254/"}, "allow_private_network"},
		{"mapped loopback", Config{URL: "http://[::ffff:127.0.0.1]/"}, "allow_private_network"},
		{"userinfo", Config{URL: "https://u:p@hooks.example.test/x"}, "userinfo"},
		{"ftp", Config{URL: "ftp://hooks.example.test/x"}, "https"},
		{"no host", Config{URL: "https:///x"}, "no host"},
		{"reserved header", Config{URL: "https://hooks.example.test/x", Headers: map[string]string{"Idempotency-Key": "x"}}, "set by the webhook"},
		{"signature header", Config{URL: "https://hooks.example.test/x", Headers: map[string]string{"webhook-signature": "x"}}, "set by the webhook"},
		{"secret header", Config{URL: "https://hooks.example.test/x", Headers: map[string]string{"Authorization": "Bearer x"}}, "secrets"},
		{"credential under an innocent name", Config{URL: "https://hooks.example.test/x", Headers: map[string]string{"X-Upstream": "Bearer sk-1"}}, "secrets"},
		{"header name with a separator", Config{URL: "https://hooks.example.test/x", Headers: map[string]string{"X(a)": "v"}}, "not valid"},
		{"header value injection", Config{URL: "https://hooks.example.test/x", Headers: map[string]string{"X-A": "a\r\nX-B: b"}}, "not valid"},
		{"no secret", Config{URL: "https://hooks.example.test/x"}, "secret"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Secret == nil && tc.name != "no secret" {
				tc.cfg.Secret = []byte("k")
			}
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := New(Config{URL: "https://hooks.example.test/x", Production: true, Secret: []byte("k")}); err != nil {
		t.Fatalf("https in production refused: %v", err)
	}
	if _, err := New(Config{URL: "http://127.0.0.1:9/x", AllowPrivateNetwork: true, Secret: []byte("k")}); err != nil {
		t.Fatalf("allow_private_network refused: %v", err)
	}
}

// TestDialTimeRefusal: a public-looking URL passes configuration but is still refused when it
// connects to a private address.
func TestDialTimeRefusal(t *testing.T) {
	srv, got := receiver(t, jsonAnswer(`{}`))
	// "localhost" is refused by configuration; here the check is the dialer's, so the URL is
	// configured with the private network allowed but sent through a strict client.
	w, err := New(Config{Tool: "t", URL: srv.URL, Secret: []byte("k"), AllowPrivateNetwork: true, Client: httpadapter.NewClient(httpadapter.DialPolicy{})})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Func()(context.Background(), tools.Call{ToolCallID: "c"}, nil)
	var te *fault.Error
	if !errors.As(err, &te) || te.Kind != fault.KindBlockedHost || te.Retryable {
		t.Fatalf("loopback through a strict client: %v, want non-retryable blocked_host", err)
	}
	if len(got) != 0 {
		t.Fatal("the refused webhook reached the server")
	}
}

func TestDecodeSecret(t *testing.T) {
	if k, err := DecodeSecret("whsec_" + base64.StdEncoding.EncodeToString([]byte("abc"))); err != nil || string(k) != "abc" {
		t.Fatalf("whsec: %q %v", k, err)
	}
	if k, err := DecodeSecret("whsecret"); err != nil || string(k) != "whsecret" {
		t.Fatalf("raw: %q %v", k, err)
	}
	for _, bad := range []string{"", "whsec_", "whsec_!!!"} {
		if _, err := DecodeSecret(bad); err == nil {
			t.Errorf("DecodeSecret(%q) accepted", bad)
		}
	}
}

func TestSignStandardMatchesReference(t *testing.T) {
	ref, _ := standardwebhooks.NewWebhookRaw([]byte("key"))
	ts := time.Unix(1700000000, 0)
	want, _ := ref.Sign("msg_1", ts, []byte(`{"a":1}`))
	if got := SignStandard([]byte("key"), "msg_1", ts, []byte(`{"a":1}`)); got != want {
		t.Fatalf("SignStandard = %q, reference = %q", got, want)
	}
}

// TestDryRunHidesThePath: a hook URL's path and query are its credential (chat and automation
// hooks), so the approval card's plan shows only the scheme and host, and the arguments.
func TestDryRunHidesThePath(t *testing.T) {
	w, err := New(Config{Tool: "notify", URL: "https://hooks.example.test/services/T0/B0/s3cretpath?sig=abc123", Secret: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := w.DryRun()(context.Background(), tools.Call{}, map[string]any{"text": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := json.Marshal(plan)
	if strings.Contains(string(enc), "s3cretpath") || strings.Contains(string(enc), "abc123") ||
		!strings.Contains(plan.Summary, "https://hooks.example.test/…") || plan.Details["arguments"].(map[string]any)["text"] != "hi" {
		t.Fatalf("plan %s: want host only, and the arguments", enc)
	}
}

// TestKeysDifferAcrossConversations: two conversations whose models both named a call "call_0"
// send two different idempotency keys, so a receiver that deduplicates never drops the second.
func TestKeysDifferAcrossConversations(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_772_366_400, 0))
	srv, got := receiver(t, jsonAnswer(`{}`))
	w := newHook(t, srv.URL, "secret", clk)
	for _, conv := range []string{"alice-conv", "bob-conv"} {
		if _, err := w.Func()(context.Background(), tools.Call{ToolCallID: "call_0", ConversationID: conv}, nil); err != nil {
			t.Fatal(err)
		}
	}
	a, b := <-got, <-got
	if a.header.Get("Idempotency-Key") == b.header.Get("Idempotency-Key") || a.header.Get("webhook-id") == b.header.Get("webhook-id") {
		t.Fatalf("two conversations' calls share a key: %v / %v", a.header, b.header)
	}
	for _, r := range []struct{ header http.Header }{{a.header}, {b.header}} {
		if !strings.HasPrefix(r.header.Get("Idempotency-Key"), "pc_") || r.header.Get("Idempotency-Key") != r.header.Get("webhook-id") {
			t.Fatalf("key %q, webhook-id %q", r.header.Get("Idempotency-Key"), r.header.Get("webhook-id"))
		}
	}
}
