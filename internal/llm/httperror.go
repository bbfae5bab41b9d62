package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"parley/internal/fault"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxErrorBody bounds how much of a failed answer's body is read for its message.
const maxErrorBody = 64 << 10

// maxErrorMessage bounds the message kept from a failed answer.
const maxErrorMessage = 500

// StatusError maps a failed HTTP answer of a model provider to an *Error: 429 is rate_limited,
// 401 and 403 not_authenticated, 5xx and 529 (Anthropic's "overloaded") provider_http_error and
// retryable, any other 4xx provider_http_error and final. body is the answer's body (its JSON
// error message is extracted when there is one); now reads an HTTP-date Retry-After.
func StatusError(status int, header http.Header, body []byte, now time.Time) *Error {
	e := &Error{Status: status, Kind: string(fault.KindProviderHTTPError), Message: errorMessage(status, body)}
	switch {
	case status == http.StatusTooManyRequests:
		e.Kind = string(fault.KindRateLimited)
		e.Retryable = true
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Kind = string(fault.KindNotAuthenticated)
	case status >= 500:
		e.Retryable = true
	}
	if e.Retryable && header != nil {
		e.RetryAfter = ParseRetryAfter(header.Get("Retry-After"), now)
	}
	return e
}

// ParseRetryAfter reads a Retry-After value, either delay-seconds or an HTTP date (RFC 9110
// 10.2.3). A missing, malformed or past value is 0.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if !(secs > 0 && secs <= 7*24*3600) { // also refuses NaN

			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	if d := t.Sub(now); d > 0 {
		return d
	}
	return 0
}

// NetworkError maps a transport failure (connect, reset, a stream cut mid-way) to a retryable
// network *Error.
func NetworkError(msg string, err error) *Error {
	return &Error{Kind: string(fault.KindNetwork), Message: msg, Retryable: true, Err: err}
}

// StreamCutError reports a stream that ended before the provider said the answer was complete;
// the caller discards what it received and may retry.
func StreamCutError(err error) *Error {
	msg := "the answer's stream ended before it was complete"
	if err != nil {
		msg += ": " + err.Error()
	}
	return NetworkError(msg, err)
}

// StatusMiddleware is an HTTP middleware for the provider SDKs (openai-go's and
// anthropic-sdk-go's option.Middleware have this exact type): it turns an answer with status
// >= 400 into an *Error carrying the status, the Retry-After delay and the provider's message,
// and a transport failure into a retryable network *Error. Doing it here rather than from the
// SDKs' own error types keeps the status and headers even when the body is not the JSON the SDK
// expects (a proxy's HTML page, Ollama's {"error":"…"}). now reads HTTP-date Retry-After values.
// The request (and its Authorization header) never reaches the error.
func StatusMiddleware(now func() time.Time) func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		res, err := next(req)
		if err != nil {
			if ctxErr := req.Context().Err(); ctxErr != nil {
				return nil, ctxErr
			}
			var le *Error
			if errors.As(err, &le) {
				return nil, err
			}
			return nil, NetworkError("the model provider could not be reached", err)
		}
		if res.StatusCode < 400 {
			return res, nil
		}
		body, readErr := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
		closeErr := res.Body.Close()
		if readErr != nil && req.Context().Err() != nil {
			return nil, req.Context().Err()
		}
		e := StatusError(res.StatusCode, res.Header, body, now())
		if readErr != nil || closeErr != nil {
			e.Err = errors.Join(readErr, closeErr)
		}
		return nil, e
	}
}

// errorMessage extracts the provider's message from an error body: OpenAI's and Anthropic's
// {"error":{"message":…}}, Ollama's {"error":"…"}, else the (trimmed) text itself.
func errorMessage(status int, body []byte) string {
	var probe struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	msg := ""
	isJSON := json.Unmarshal(body, &probe) == nil
	if isJSON {
		var obj struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		}
		var s string
		switch {
		case json.Unmarshal(probe.Error, &obj) == nil && obj.Message != "":
			msg = obj.Message
		case json.Unmarshal(probe.Error, &s) == nil && s != "":
			msg = s
		case probe.Message != "":
			msg = probe.Message
		}
	}
	if msg == "" && !isJSON {
		msg = string(bytes.TrimSpace(body))
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	if msg == "" {
		msg = fmt.Sprintf("HTTP %d", status)
	}
	return truncateUTF8(msg, maxErrorMessage)
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
