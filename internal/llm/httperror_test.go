package llm

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"1.5", 1500 * time.Millisecond},
		{"0", 0},
		{"-3", 0},
		{"999999999", 0}, // absurd: ignored rather than parking a conversation for years
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"Sun, 01 Mar 2026 12:00:30 GMT", 30 * time.Second},
		{"Sunday, 01-Mar-26 12:00:30 GMT", 30 * time.Second}, // RFC 850, still allowed by RFC 9110
		{"soon", 0},
	}
	for _, tc := range cases {
		if got := ParseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "7", "1.5", "Sun, 01 Mar 2026 12:00:30 GMT", "NaN", "Inf", "1e400"} {
		f.Add(s)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		if d := ParseRetryAfter(s, now); d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v < 0", s, d)
		}
	})
}

func TestStatusError(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	h := http.Header{"Retry-After": {"4"}}
	cases := []struct {
		status    int
		body      string
		kind      string
		retryable bool
		after     time.Duration
		message   string
	}{
		{400, `{"error":{"message":"bad role","type":"invalid_request_error"}}`, "provider_http_error", false, 0, "bad role"},
		{401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, "not_authenticated", false, 0, "invalid x-api-key"},
		{403, ``, "not_authenticated", false, 0, "Forbidden"},
		{404, `{"error":"model not found"}`, "provider_http_error", false, 0, "model not found"},
		{422, `{"message":"unprocessable"}`, "provider_http_error", false, 0, "unprocessable"},
		{429, `{}`, "rate_limited", true, 4 * time.Second, "Too Many Requests"},
		{500, `oops`, "provider_http_error", true, 4 * time.Second, "oops"},
		{529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "provider_http_error", true, 4 * time.Second, "Overloaded"},
		{599, ``, "provider_http_error", true, 4 * time.Second, "HTTP 599"},
	}
	for _, tc := range cases {
		e := StatusError(tc.status, h, []byte(tc.body), now)
		if e.Status != tc.status || e.Kind != tc.kind || e.Retryable != tc.retryable || e.RetryAfter != tc.after || e.Message != tc.message {
			t.Errorf("StatusError(%d, %s) = %+v", tc.status, tc.body, e)
		}
	}
	long := StatusError(500, nil, []byte(strings.Repeat("é", 1000)), now)
	if len(long.Message) > maxErrorMessage+len("…") || !strings.HasSuffix(long.Message, "…") || !strings.HasPrefix(long.Message, "é") {
		t.Errorf("long message not bounded on a rune boundary: %d bytes", len(long.Message))
	}
}

func TestErrorHelpers(t *testing.T) {
	cause := errors.New("connection reset by peer")
	e := StreamCutError(cause)
	if !errors.Is(e, cause) || e.Kind != "network" || !e.Retryable || !strings.Contains(e.Error(), "connection reset") {
		t.Errorf("StreamCutError = %+v", e)
	}
	var wrapped error = e
	if ok, _ := IsRetryable(wrapped); !ok {
		t.Error("IsRetryable(cut)")
	}
	if ok, _ := IsRetryable(errors.New("plain")); ok {
		t.Error("a plain error is not a retryable model error")
	}
}

type closeTracker struct {
	*strings.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }

func TestStatusMiddleware(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mw := StatusMiddleware(func() time.Time { return now })
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/v1/messages", nil)
	req.Header.Set("Authorization", "Bearer sk-secret")

	ok := &http.Response{StatusCode: 200, Body: &closeTracker{Reader: strings.NewReader("data: {}\n\n")}}
	res, err := mw(req, func(*http.Request) (*http.Response, error) { return ok, nil })
	if err != nil || res != ok || ok.Body.(*closeTracker).closed {
		t.Fatalf("a 200 must pass through untouched: %v %v", res, err)
	}

	body := &closeTracker{Reader: strings.NewReader(`{"error":{"message":"slow down"}}`)}
	bad := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {now.Add(time.Minute).Format(http.TimeFormat)}}, Body: body}
	res, err = mw(req, func(*http.Request) (*http.Response, error) { return bad, nil })
	var e *Error
	if res != nil || !errors.As(err, &e) || e.Kind != "rate_limited" || e.RetryAfter != time.Minute || e.Message != "slow down" || !body.closed {
		t.Fatalf("429: res %v err %#v closed %v", res, err, body.closed)
	}
	if strings.Contains(err.Error(), "sk-secret") {
		t.Error("the error leaks the credential")
	}

	dial := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	_, err = mw(req, func(*http.Request) (*http.Response, error) { return nil, dial })
	if !errors.As(err, &e) || e.Kind != "network" || !e.Retryable || !errors.Is(err, dial) {
		t.Fatalf("transport failure: %#v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = mw(req.WithContext(ctx), func(*http.Request) (*http.Response, error) { return nil, errors.New("use of closed connection") })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled request reports the cancellation, got %v", err)
	}
}
