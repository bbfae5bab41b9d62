package httpadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/telemetry"
	"parley/internal/tools"
)

// Defaults of the HTTP adapter.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxResponseBytes = 1 << 20
)

// Request is the HTTP adapter's request: method, url, headers, params (query), body or json,
// timeout. Credentials are named by reference and turned into headers only when sending.
type Request struct {
	Method  string
	URL     string
	Headers http.Header
	// Params are added to the URL's query.
	Params url.Values
	// Body is sent as is; JSON, when set instead, is encoded with Content-Type application/json.
	Body []byte
	JSON any
	// Timeout bounds the whole exchange, body included; 0 uses the adapter's default.
	Timeout time.Duration
	// CredentialRefs are resolved by the adapter's CredentialResolver into headers at send time.
	CredentialRefs []string
}

// CredentialResolver is host-owned: it turns a credential reference into the headers that carry
// it (for example Authorization). Values never enter a request map, a result, an error or a log.
type CredentialResolver interface {
	ResolveCredential(ctx context.Context, ref string) (http.Header, error)
}

// CredentialResolverFunc adapts a function to CredentialResolver.
type CredentialResolverFunc func(ctx context.Context, ref string) (http.Header, error)

// ResolveCredential calls f.
func (f CredentialResolverFunc) ResolveCredential(ctx context.Context, ref string) (http.Header, error) {
	return f(ctx, ref)
}

// HTTP is the HTTP adapter. Its zero value is not usable: Client must be set (NewClient).
type HTTP struct {
	Client *http.Client
	// Clock reads "now" for an HTTP-date Retry-After; nil uses the wall clock.
	Clock clock.Clock
	// MaxResponseBytes bounds how much of a body is read; 0 uses DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// DefaultTimeout applies when a request has none; 0 uses DefaultTimeout.
	DefaultTimeout time.Duration
	// Credentials resolves CredentialRefs; a request naming refs without it is refused.
	Credentials CredentialResolver
}

var _ Adapter = (*HTTP)(nil)

// Name is "http".
func (h *HTTP) Name() string { return "http" }

// Call accepts a Request, a *Request, or a request map with the keys method, url, headers,
// params, body, json and timeout (seconds).
func (h *HTTP) Call(ctx context.Context, request any, cc CallContext) (*Result, *Error) {
	switch r := request.(type) {
	case Request:
		return h.Do(ctx, r, cc)
	case *Request:
		if r == nil {
			return nil, h.fail(fault.KindInvalidArgs, "no request", nil)
		}
		return h.Do(ctx, *r, cc)
	case map[string]any:
		req, err := requestFromMap(r)
		if err != nil {
			return nil, h.fail(fault.KindInvalidArgs, err.Error(), nil)
		}
		return h.Do(ctx, req, cc)
	}
	return nil, h.fail(fault.KindInvalidArgs, fmt.Sprintf("unsupported request type %T", request), nil)
}

func (h *HTTP) fail(kind fault.Kind, msg string, details map[string]any) *Error {
	return &Error{Adapter: h.Name(), Kind: kind, Message: msg, Details: details}
}

// Do sends one request and normalizes the answer. It never retries and never follows a
// redirect (the client returns 3xx as is). Status >= 400 is an Error of kind http_error,
// retryable for 429 and 5xx with Retry-After honoured; a timeout is a retryable timeout; a
// refused private address is blocked_host; other transport failures are retryable network
// errors.
func (h *HTTP) Do(ctx context.Context, r Request, cc CallContext) (*Result, *Error) {
	method := strings.ToUpper(strings.TrimSpace(r.Method))
	if method == "" {
		method = http.MethodGet
	}
	if !validMethod(method) {
		return nil, h.fail(fault.KindInvalidArgs, fmt.Sprintf("method %q is not supported", r.Method), nil)
	}
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, h.fail(fault.KindInvalidArgs, "the URL must be an absolute http or https URL", nil)
	}
	if len(r.Params) > 0 {
		q := u.Query()
		for k, vs := range r.Params {
			for _, v := range vs {
				q.Add(k, v)
			}
		}
		u.RawQuery = q.Encode()
	}
	var body io.Reader
	var contentType string
	switch {
	case r.JSON != nil && r.Body != nil:
		return nil, h.fail(fault.KindInvalidArgs, "a request has either a body or json, not both", nil)
	case r.JSON != nil:
		b, err := json.Marshal(r.JSON)
		if err != nil {
			return nil, h.fail(fault.KindInvalidArgs, "the json body could not be encoded", nil)
		}
		body, contentType = bytes.NewReader(b), "application/json"
	case r.Body != nil:
		body = bytes.NewReader(r.Body)
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = h.DefaultTimeout
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, h.fail(fault.KindInvalidArgs, "the request could not be built", nil)
	}
	for k, vs := range r.Headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if contentType != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", contentType)
	}
	if cc.Key != "" && req.Header.Get("Idempotency-Key") == "" {
		req.Header.Set("Idempotency-Key", cc.Key)
	}
	meta := map[string]any{"method": method, "url": RedactURL(u)}
	// sent are the credential values this request carries: an answer that reflects one (an echo
	// or debug endpoint, an error page quoting the request) has it cut out of the result.
	var sent []string
	if len(r.CredentialRefs) > 0 {
		if h.Credentials == nil {
			return nil, h.fail(fault.KindResourceMissing, "the request names credentials but no credential resolver is configured", nil)
		}
		for _, ref := range r.CredentialRefs {
			hdr, err := h.Credentials.ResolveCredential(ctx, ref)
			if err != nil {
				return nil, h.fail(fault.KindResourceMissing, fmt.Sprintf("credential %q could not be resolved", ref), nil)
			}
			for k, vs := range hdr {
				req.Header.Del(k)
				for _, v := range vs {
					req.Header.Add(k, v)
					sent = append(sent, credentialParts(v)...)
				}
			}
		}
		meta["credential_refs"] = append([]string(nil), r.CredentialRefs...)
	}

	telemetry.Inject(ctx, req.Header) // W3C traceparent of the calling span (the tool's), when tracing
	resp, err := h.Client.Do(req)
	if err != nil {
		return nil, h.transportError(ctx, err, meta)
	}
	defer resp.Body.Close()

	limit := h.MaxResponseBytes
	if limit <= 0 {
		limit = DefaultMaxResponseBytes
	}
	raw, readErr := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	truncated := int64(len(raw)) > limit
	if truncated {
		raw = raw[:limit]
	} else if readErr != nil {
		return nil, h.transportError(ctx, readErr, meta)
	}
	payload := map[string]any{
		"status":         resp.StatusCode,
		"headers":        scrubSecrets(headerMap(resp.Header), sent),
		"body":           scrubSecrets(decodeBody(raw, resp.Header.Get("Content-Type"), truncated), sent),
		"body_truncated": truncated,
	}
	if !truncated {
		// Trailers are known only once the body has been read to its end.
		payload["trailers"] = scrubSecrets(headerMap(resp.Trailer), sent)
	} else {
		payload["trailers"] = map[string]any{}
	}
	meta["status"] = resp.StatusCode

	if resp.StatusCode >= 400 {
		e := h.fail(fault.KindHTTPError, fmt.Sprintf("%s %s answered %d %s", method, meta["url"], resp.StatusCode, http.StatusText(resp.StatusCode)), map[string]any{
			"status":         resp.StatusCode,
			"headers":        payload["headers"],
			"body":           payload["body"],
			"body_truncated": truncated,
			"method":         method,
			"url":            meta["url"],
		})
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			e.Retryable = true
			e.RetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), h.now())
		}
		return nil, e
	}
	return &Result{Adapter: h.Name(), Payload: payload, Metadata: meta}, nil
}

func (h *HTTP) now() time.Time {
	if h.Clock == nil {
		return time.Now()
	}
	return h.Clock.Now()
}

// transportError classifies a failure to get (or read) an answer.
func (h *HTTP) transportError(ctx context.Context, err error, meta map[string]any) *Error {
	details := map[string]any{"method": meta["method"], "url": meta["url"]}
	var ne net.Error
	switch {
	case errors.Is(err, ErrBlockedAddress):
		return h.fail(fault.KindBlockedHost, fmt.Sprintf("%s resolves to an address that is not allowed", meta["url"]), details)
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		e := h.fail(fault.KindTimeout, fmt.Sprintf("%s %s did not answer in time", meta["method"], meta["url"]), details)
		e.Retryable = true
		return e
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return h.fail(fault.KindNetwork, "the request was cancelled", details)
	}
	e := h.fail(fault.KindNetwork, fmt.Sprintf("%s %s failed: %s", meta["method"], meta["url"], transportReason(err)), details)
	e.Retryable = true
	return e
}

// transportReason is a short cause without addresses the model need not see.
func transportReason(err error) string {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.As(err, &dnsErr):
		return "the host name could not be resolved"
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return "the connection could not be established"
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return "the connection closed early"
	}
	return "transport error"
}

// ParseRetryAfter reads a Retry-After header: delay-seconds or an HTTP-date relative to now.
// Unparsable or past values are zero.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(24*time.Hour/time.Second) {
			secs = int64(24 * time.Hour / time.Second)
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

func validMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

// headerMap renders headers as plain data: lower-case names, values joined by ", ", sensitive
// values redacted. A redirect's Location often carries a token (an OAuth code, a presigned
// URL's signature): its userinfo and sensitive query values are redacted like a request URL's.
func headerMap(h http.Header) map[string]any {
	out := make(map[string]any, len(h))
	for k, vs := range h {
		name := strings.ToLower(k)
		switch {
		case IsSensitiveHeader(name):
			out[name] = Redacted
		case name == "location" || name == "content-location":
			shown := make([]string, len(vs))
			for i, v := range vs {
				shown[i] = redactURLString(v)
			}
			out[name] = strings.Join(shown, ", ")
		default:
			out[name] = strings.Join(vs, ", ")
		}
	}
	return out
}

// redactURLString redacts a URL given as text; text that does not parse is redacted whole.
func redactURLString(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return Redacted
	}
	if u.User == nil && u.RawQuery == "" {
		return s
	}
	return RedactURL(u)
}

// decodeBody returns a complete JSON body as plain data and anything else as text.
func decodeBody(raw []byte, contentType string, truncated bool) any {
	if len(raw) == 0 {
		return ""
	}
	if !truncated && isJSON(contentType) {
		if v, err := tools.DecodeJSON(raw); err == nil {
			return v
		}
	}
	if !utf8.Valid(raw) {
		return strings.ToValidUTF8(string(raw), "\uFFFD")
	}
	return string(raw)
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// requestFromMap decodes the map form of a Request.
func requestFromMap(m map[string]any) (Request, error) {
	var r Request
	for k, v := range m {
		switch k {
		case "method":
			s, ok := v.(string)
			if !ok {
				return r, errors.New("method must be a string")
			}
			r.Method = s
		case "url":
			s, ok := v.(string)
			if !ok {
				return r, errors.New("url must be a string")
			}
			r.URL = s
		case "headers":
			hm, ok := v.(map[string]any)
			if !ok {
				return r, errors.New("headers must be an object of strings")
			}
			r.Headers = http.Header{}
			for hk, hv := range hm {
				s, ok := hv.(string)
				if !ok {
					return r, fmt.Errorf("header %q must be a string", hk)
				}
				r.Headers.Add(hk, s)
			}
		case "params":
			pm, ok := v.(map[string]any)
			if !ok {
				return r, errors.New("params must be an object")
			}
			r.Params = url.Values{}
			for pk, pv := range pm {
				s, err := scalarString(pv)
				if err != nil {
					return r, fmt.Errorf("param %q: %w", pk, err)
				}
				r.Params.Add(pk, s)
			}
		case "body":
			s, ok := v.(string)
			if !ok {
				return r, errors.New("body must be a string")
			}
			r.Body = []byte(s)
		case "json":
			r.JSON = v
		case "timeout":
			secs, ok := toFloat(v)
			if !ok || secs <= 0 {
				return r, errors.New("timeout must be a positive number of seconds")
			}
			r.Timeout = time.Duration(secs * float64(time.Second))
		default:
			return r, fmt.Errorf("unknown request key %q", k)
		}
	}
	return r, nil
}

// RedactURL renders u with userinfo removed and the values of sensitive query keys redacted.
func RedactURL(u *url.URL) string {
	c := *u
	c.User = nil
	if c.RawQuery != "" {
		q := c.Query()
		keys := make([]string, 0, len(q))
		for k := range q {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if IsSensitiveKey(k) {
				q[k] = []string{Redacted}
			}
		}
		c.RawQuery = q.Encode()
	}
	return c.String()
}
