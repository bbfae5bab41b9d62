package httpadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
)

// loopbackClient reaches httptest servers (127.0.0.1) and nothing else private.
func loopbackClient(t *testing.T) *http.Client {
	t.Helper()
	c := NewClient(DialPolicy{PrivateHosts: []string{"127.0.0.1"}})
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func serve(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestInvokeNormalizes(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "session=abc")
		w.Header().Set("X-Request-Id", "r1")
		if got := r.Header.Get("Idempotency-Key"); got != "pc_key1" {
			t.Errorf("Idempotency-Key = %q, want pc_key1", got)
		}
		if got := r.URL.Query().Get("q"); got != "a b" {
			t.Errorf("query q = %q", got)
		}
		fmt.Fprint(w, `{"temp": 21, "ok": true}`)
	})
	h := &HTTP{Client: loopbackClient(t)}
	res, aerr := Invoke(context.Background(), h, map[string]any{"method": "get", "url": srv.URL + "/w", "params": map[string]any{"q": "a b"}, "timeout": int64(5)}, CallContext{ToolCallID: "call_1", Key: "pc_key1"})
	if aerr != nil {
		t.Fatalf("Invoke: %v", aerr)
	}
	if res.Adapter != "http" || res.Metadata["method"] != "GET" || !strings.HasPrefix(res.Metadata["url"].(string), srv.URL+"/w?") {
		t.Errorf("result adapter/metadata = %q %v", res.Adapter, res.Metadata)
	}
	if res.Payload["status"] != 200 {
		t.Errorf("status = %v", res.Payload["status"])
	}
	body, ok := res.Payload["body"].(map[string]any)
	if !ok || body["temp"] != int64(21) || body["ok"] != true {
		t.Errorf("body = %#v, want decoded JSON", res.Payload["body"])
	}
	hdr := res.Payload["headers"].(map[string]any)
	if hdr["set-cookie"] != Redacted || hdr["x-request-id"] != "r1" {
		t.Errorf("headers = %v: set-cookie must be redacted, others kept", hdr)
	}
}

func TestInvokeContract(t *testing.T) {
	tests := []struct {
		name     string
		adapter  Adapter
		wantKind fault.Kind
	}{
		{"panic becomes internal", adapterFunc(func() (*Result, *Error) { panic("boom") }), fault.KindInternal},
		{"neither result nor error", adapterFunc(func() (*Result, *Error) { return nil, nil }), fault.KindInternal},
		{"error gets the adapter name", adapterFunc(func() (*Result, *Error) { return nil, &Error{Kind: fault.KindNetwork} }), fault.KindNetwork},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, aerr := Invoke(context.Background(), tc.adapter, nil, CallContext{})
			if res != nil || aerr == nil || aerr.Kind != tc.wantKind || aerr.Adapter != "fake" {
				t.Fatalf("Invoke = %v, %+v; want error of kind %s from adapter fake", res, aerr, tc.wantKind)
			}
		})
	}
	res, aerr := Invoke(context.Background(), adapterFunc(func() (*Result, *Error) { return &Result{Payload: map[string]any{}}, nil }), nil, CallContext{})
	if aerr != nil || res.Adapter != "fake" {
		t.Fatalf("success = %+v, %v", res, aerr)
	}
}

type adapterFunc func() (*Result, *Error)

func (f adapterFunc) Name() string { return "fake" }
func (f adapterFunc) Call(context.Context, any, CallContext) (*Result, *Error) {
	return f()
}

func TestErrorToMapAndToolError(t *testing.T) {
	e := &Error{Adapter: "http", Kind: fault.KindHTTPError, Message: "m", Retryable: true, RetryAfter: 2 * time.Second}
	m := e.ToMap()
	if m["adapter"] != "http" || m["kind"] != "http_error" || m["retryable"] != true || m["retry_after_ms"] != int64(2000) {
		t.Errorf("ToMap = %v", m)
	}
	if _, ok := m["details"].(map[string]any); !ok {
		t.Errorf("details must be a plain map even when empty: %v", m["details"])
	}
	te := e.ToolError()
	if te.Kind != fault.KindHTTPError || !te.Retryable || te.RetryAfter != 2*time.Second {
		t.Errorf("ToolError = %+v", te)
	}
}

func TestHTTPStatusAndTransportErrors(t *testing.T) {
	fakeNow := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name          string
		handler       http.HandlerFunc
		wantKind      fault.Kind
		wantRetryable bool
		wantAfter     time.Duration
	}{
		{"400 is not retryable", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(400) }, fault.KindHTTPError, false, 0},
		{"404 is not retryable", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) }, fault.KindHTTPError, false, 0},
		{"429 with Retry-After seconds", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(429)
		}, fault.KindHTTPError, true, 7 * time.Second},
		{"503 with Retry-After date", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", fakeNow.Add(90*time.Second).Format(http.TimeFormat))
			w.WriteHeader(503)
		}, fault.KindHTTPError, true, 90 * time.Second},
		{"500 without Retry-After", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, fault.KindHTTPError, true, 0},
		{"timeout", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, fault.KindTimeout, true, 0},
		{"timeout while the body streams", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "first part")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}, fault.KindTimeout, true, 0},
		{"connection reset mid-answer", func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
			_ = conn.Close()
		}, fault.KindNetwork, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, tc.handler)
			h := &HTTP{Client: loopbackClient(t), Clock: clock.NewFake(fakeNow)}
			_, aerr := h.Do(context.Background(), Request{Method: "GET", URL: srv.URL, Timeout: 100 * time.Millisecond}, CallContext{})
			if aerr == nil {
				t.Fatal("want an error")
			}
			if aerr.Kind != tc.wantKind || aerr.Retryable != tc.wantRetryable || aerr.RetryAfter != tc.wantAfter {
				t.Fatalf("error = kind %s retryable %v after %v (%s); want %s %v %v", aerr.Kind, aerr.Retryable, aerr.RetryAfter, aerr.Message, tc.wantKind, tc.wantRetryable, tc.wantAfter)
			}
		})
	}
}

func TestHTTPConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	h := &HTTP{Client: loopbackClient(t)}
	_, aerr := h.Do(context.Background(), Request{URL: "http://" + addr + "/"}, CallContext{})
	if aerr == nil || aerr.Kind != fault.KindNetwork || !aerr.Retryable {
		t.Fatalf("error = %+v, want retryable network", aerr)
	}
}

func TestHTTPRedirectNotFollowed(t *testing.T) {
	var targetHits atomic.Int32
	target := serve(t, func(w http.ResponseWriter, r *http.Request) { targetHits.Add(1) })
	for _, loc := range []string{target.URL + "/next", "http://10.0.0.1/admin", "http://169.254.169.254/latest/meta-data/"} {
		t.Run(loc, func(t *testing.T) {
			srv := serve(t, func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, loc, http.StatusFound) })
			h := &HTTP{Client: loopbackClient(t)}
			res, aerr := h.Do(context.Background(), Request{URL: srv.URL}, CallContext{})
			if aerr != nil {
				t.Fatalf("Do: %v", aerr)
			}
			if res.Payload["status"] != 302 || res.Payload["headers"].(map[string]any)["location"] != loc {
				t.Fatalf("payload = %v, want the 302 itself", res.Payload)
			}
		})
	}
	if n := targetHits.Load(); n != 0 {
		t.Fatalf("redirect target was requested %d times", n)
	}
}

func TestHTTPBodyBoundedAndTrailers(t *testing.T) {
	big := strings.Repeat("x", 10_000)
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			fmt.Fprint(w, big)
			return
		}
		w.Header().Set("Trailer", "X-Checksum")
		fmt.Fprint(w, "small")
		w.Header().Set("X-Checksum", "abc123")
	})
	h := &HTTP{Client: loopbackClient(t), MaxResponseBytes: 1024}
	res, aerr := h.Do(context.Background(), Request{URL: srv.URL + "/big"}, CallContext{})
	if aerr != nil {
		t.Fatal(aerr)
	}
	if b := res.Payload["body"].(string); len(b) != 1024 || res.Payload["body_truncated"] != true {
		t.Fatalf("body len %d truncated %v, want 1024 and true", len(b), res.Payload["body_truncated"])
	}
	res, aerr = h.Do(context.Background(), Request{URL: srv.URL + "/small"}, CallContext{})
	if aerr != nil {
		t.Fatal(aerr)
	}
	if res.Payload["body"] != "small" || res.Payload["trailers"].(map[string]any)["x-checksum"] != "abc123" {
		t.Fatalf("payload = %v, want body and trailer", res.Payload)
	}
}

func TestHTTPCredentialsAtTransportBoundary(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.WriteHeader(401)
			fmt.Fprint(w, r.Header.Get("Authorization"))
			return
		}
		fmt.Fprint(w, "ok")
	})
	resolver := CredentialResolverFunc(func(ctx context.Context, ref string) (http.Header, error) {
		if ref != "billing_api" {
			return nil, errors.New("unknown")
		}
		return http.Header{"Authorization": {"Bearer s3cret"}}, nil
	})
	h := &HTTP{Client: loopbackClient(t), Credentials: resolver}
	res, aerr := h.Do(context.Background(), Request{URL: srv.URL, CredentialRefs: []string{"billing_api"}}, CallContext{})
	if aerr != nil {
		t.Fatalf("Do: %v", aerr)
	}
	if s := fmt.Sprint(res); strings.Contains(s, "s3cret") {
		t.Fatalf("the credential leaked into the result: %s", s)
	}
	if _, aerr = h.Do(context.Background(), Request{URL: srv.URL, CredentialRefs: []string{"other"}}, CallContext{}); aerr == nil || aerr.Kind != fault.KindResourceMissing {
		t.Fatalf("unknown ref: %+v", aerr)
	}
	if _, aerr = (&HTTP{Client: loopbackClient(t)}).Do(context.Background(), Request{URL: srv.URL, CredentialRefs: []string{"billing_api"}}, CallContext{}); aerr == nil || aerr.Kind != fault.KindResourceMissing {
		t.Fatalf("no resolver: %+v", aerr)
	}
}

func TestHTTPRefusesBadRequests(t *testing.T) {
	h := &HTTP{Client: loopbackClient(t)}
	tests := []Request{
		{Method: "TRACE", URL: "http://127.0.0.1/"},
		{URL: "ftp://127.0.0.1/"},
		{URL: "/relative"},
		{URL: "http://127.0.0.1/", Body: []byte("x"), JSON: map[string]any{}},
	}
	for _, r := range tests {
		if _, aerr := h.Do(context.Background(), r, CallContext{}); aerr == nil || aerr.Kind != fault.KindInvalidArgs {
			t.Errorf("%+v: error %+v, want invalid_args", r, aerr)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := map[string]time.Duration{
		"":   0,
		"0":  0,
		"-5": 0,
		"12": 12 * time.Second,
		now.Add(time.Minute).Format(http.TimeFormat):  time.Minute,
		now.Add(-time.Minute).Format(http.TimeFormat): 0,
		"soon":      0,
		"999999999": 24 * time.Hour,
	}
	for in, want := range tests {
		if got := ParseRetryAfter(in, now); got != want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestHTTPRedirectLocationRedacted: a Location that carries a token (OAuth code, presigned
// signature, userinfo) reaches the result with those values redacted.
func TestHTTPRedirectLocationRedacted(t *testing.T) {
	loc := "https://app.example.test/cb?access_token=tok-123&state=s1"
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", loc)
		w.Header().Add("Content-Location", "https://user:pw-456@cdn.example.test/f")
		w.WriteHeader(http.StatusFound)
	})
	res, aerr := (&HTTP{Client: loopbackClient(t)}).Do(context.Background(), Request{URL: srv.URL}, CallContext{})
	if aerr != nil {
		t.Fatal(aerr)
	}
	h := res.Payload["headers"].(map[string]any)
	if got := h["location"].(string); strings.Contains(got, "tok-123") || !strings.Contains(got, "state=s1") || !strings.Contains(got, "app.example.test/cb") {
		t.Fatalf("location = %q, want the token redacted and the rest kept", got)
	}
	if got := h["content-location"].(string); strings.Contains(got, "pw-456") || strings.Contains(got, "user") {
		t.Fatalf("content-location = %q, want the userinfo dropped", got)
	}
}

// TestReflectedCredentialIsCut: an answer that reflects the credential the request carried (an
// echo or debug endpoint, an error page quoting the request), in its body, a header of an
// innocent name or an error's body, has it cut out of what the result holds.
func TestReflectedCredentialIsCut(t *testing.T) {
	const secret = "sk-live-reflected-0042"
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.Header.Get("Authorization"))
		if r.URL.Path == "/err" {
			w.WriteHeader(http.StatusBadRequest)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"you_sent": %q, "token only": %q}`, r.Header.Get("Authorization"), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	})
	h := &HTTP{Client: NewClient(DialPolicy{PrivateHosts: []string{"127.0.0.1"}}), Credentials: CredentialResolverFunc(func(context.Context, string) (http.Header, error) {
		return http.Header{"Authorization": {"Bearer " + secret}}, nil
	})}
	res, aerr := h.Do(context.Background(), Request{Method: "GET", URL: srv.URL + "/ok", CredentialRefs: []string{"c"}}, CallContext{})
	if aerr != nil {
		t.Fatal(aerr)
	}
	_, e2 := h.Do(context.Background(), Request{Method: "GET", URL: srv.URL + "/err", CredentialRefs: []string{"c"}}, CallContext{})
	for _, v := range []any{res.Payload, e2.Details, e2.Message} {
		b, _ := json.Marshal(v)
		if strings.Contains(string(b), "reflected-0042") {
			t.Errorf("the credential came back: %s", b)
		}
		if !strings.Contains(string(b), Redacted) && v != any(e2.Message) {
			t.Errorf("nothing redacted in %s", b)
		}
	}
}
