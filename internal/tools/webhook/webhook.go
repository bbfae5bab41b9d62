// Package webhook runs webhook tools: a signed POST of the call to an external endpoint whose
// 2xx JSON answer is the tool's result.
//
// The request carries Idempotency-Key and webhook-id equal to the call's key (tools.Call.Key:
// the same on every attempt, unique in the whole store even when models reuse tool_call_ids);
// X-Webhook-Signature (sha256=<hex HMAC-SHA256 of "timestamp.body">, the timestamp being
// webhook-timestamp's, so a captured request cannot be replayed later than the receiver's
// tolerance) and the Standard Webhooks signature (webhook-signature: v1,<base64 HMAC-SHA256 of
// "id.timestamp.body">), both with one key. The adapter sends once: retries belong to the agent's loop, which reads the
// returned tool error's Retryable and RetryAfter.
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
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/tools"
	"parley/internal/tools/httpadapter"
)

// Headers the webhook sets; a tool's own headers may not override them.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderSignature      = "X-Webhook-Signature"
	HeaderID             = "webhook-id"
	HeaderTimestamp      = "webhook-timestamp"
	HeaderSignatureV1    = "webhook-signature"
)

// Defaults.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxResponseBytes = 256 << 10
)

// secretPrefix marks a Standard Webhooks secret, base64 after the prefix.
const secretPrefix = "whsec_"

// Config declares one webhook tool's endpoint.
type Config struct {
	// Tool is the tool's name, sent as "tool".
	Tool string
	URL  string
	// Headers are extra fixed headers; secret-bearing and reserved names are refused.
	Headers map[string]string
	// Timeout bounds one attempt; 0 uses DefaultTimeout.
	Timeout time.Duration
	// Secret is the signing key, already decoded (DecodeSecret).
	Secret []byte
	// Production refuses a plain-HTTP URL.
	Production bool
	// AllowPrivateNetwork lets the URL reach loopback or private addresses.
	AllowPrivateNetwork bool
	// Client sends the requests; nil builds httpadapter.NewClient with the dial policy above.
	Client *http.Client
	// Clock stamps webhook-timestamp and reads HTTP-date Retry-After values; nil is the wall clock.
	Clock clock.Clock
	// MaxResponseBytes bounds the answer read; 0 uses DefaultMaxResponseBytes.
	MaxResponseBytes int64
}

// Webhook is a checked webhook endpoint; safe for concurrent use.
type Webhook struct {
	cfg     Config
	url     *url.URL
	adapter *httpadapter.HTTP
}

// DecodeSecret turns a configured secret into the HMAC key: "whsec_<base64>" is decoded, any
// other secret is used as its bytes.
func DecodeSecret(s string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(s, secretPrefix); ok {
		key, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return nil, fmt.Errorf("decode %s secret: %w", secretPrefix, err)
		}
		if len(key) == 0 {
			return nil, errors.New("the whsec_ secret is empty")
		}
		return key, nil
	}
	if s == "" {
		return nil, errors.New("the secret is empty")
	}
	return []byte(s), nil
}

var reserved = map[string]bool{
	"content-type": true, "content-length": true, "host": true, "transfer-encoding": true, "connection": true,
	strings.ToLower(HeaderIdempotencyKey): true, strings.ToLower(HeaderSignature): true,
	HeaderID: true, HeaderTimestamp: true, HeaderSignatureV1: true,
}

// CheckURL validates a webhook URL: absolute http(s) with a host and no userinfo, HTTPS when
// production, and, without allowPrivate, not a host that is private on its face (the dialer
// also refuses a public-looking name that resolves to a private address).
func CheckURL(raw string, production, allowPrivate bool) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("the URL does not parse: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("the URL must use https (or http outside production)")
	case u.Hostname() == "":
		return nil, errors.New("the URL has no host")
	case u.User != nil:
		return nil, errors.New("the URL must not contain userinfo")
	case u.Fragment != "":
		return nil, errors.New("the URL must not contain a fragment")
	case production && u.Scheme != "https":
		return nil, errors.New("production requires an https webhook URL")
	case !allowPrivate && httpadapter.IsPrivateLiteral(u.Hostname()):
		return nil, fmt.Errorf("host %q is a loopback or private-network target: set allow_private_network to allow it", u.Hostname())
	}
	return u, nil
}

// CheckHeaders refuses reserved and secret-bearing extra headers.
func CheckHeaders(h map[string]string) error {
	var bad []string
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, lk := h[k], strings.ToLower(k)
		switch {
		case reserved[lk]:
			bad = append(bad, fmt.Sprintf("header %q is set by the webhook itself", k))
		case !httpadapter.ValidHeaderName(k) || strings.ContainsAny(v, "\r\n\x00"):
			bad = append(bad, fmt.Sprintf("header %q is not valid", k))
		case httpadapter.IsSensitiveHeader(lk) || httpadapter.LooksLikeCredential(v):
			bad = append(bad, fmt.Sprintf("header %q carries secrets: the signature (secret_env) authenticates the call", k))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// New checks cfg and prepares the endpoint.
func New(cfg Config) (*Webhook, error) {
	u, err := CheckURL(cfg.URL, cfg.Production, cfg.AllowPrivateNetwork)
	if err != nil {
		return nil, fmt.Errorf("webhook %s: %w", cfg.Tool, err)
	}
	if err := CheckHeaders(cfg.Headers); err != nil {
		return nil, fmt.Errorf("webhook %s: %w", cfg.Tool, err)
	}
	if len(cfg.Secret) == 0 {
		return nil, fmt.Errorf("webhook %s: a signing secret is required", cfg.Tool)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	client := cfg.Client
	if client == nil {
		client = httpadapter.NewClient(httpadapter.DialPolicy{AllowPrivateNetwork: cfg.AllowPrivateNetwork})
	}
	return &Webhook{
		cfg: cfg,
		url: u,
		adapter: &httpadapter.HTTP{
			Client: client, Clock: cfg.Clock, MaxResponseBytes: cfg.MaxResponseBytes, DefaultTimeout: cfg.Timeout,
		},
	}, nil
}

// Payload is the body of a webhook call.
type Payload struct {
	ToolCallID     string         `json:"tool_call_id"`
	ConversationID string         `json:"conversation_id"`
	Tool           string         `json:"tool"`
	Arguments      map[string]any `json:"arguments"`
}

// SignHMAC is the X-Webhook-Signature value of a body sent at ts: "sha256=" and the hex
// HMAC-SHA256 of "<unix timestamp>.<body>" (the timestamp is webhook-timestamp's). Signing the
// timestamp lets a receiver refuse a replayed request once it is older than its tolerance.
func SignHMAC(key []byte, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(strconv.FormatInt(ts.Unix(), 10) + "."))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// SignStandard is the Standard Webhooks webhook-signature value: "v1," and the base64
// HMAC-SHA256 of "<id>.<unix timestamp>.<body>".
func SignStandard(key []byte, id string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Request builds the signed request of one attempt.
func (w *Webhook) Request(call tools.Call, args map[string]any) (httpadapter.Request, error) {
	if args == nil {
		args = map[string]any{}
	}
	body, err := json.Marshal(Payload{ToolCallID: call.ToolCallID, ConversationID: call.ConversationID, Tool: w.cfg.Tool, Arguments: args})
	if err != nil {
		return httpadapter.Request{}, fmt.Errorf("encode webhook payload: %w", err)
	}
	now := w.cfg.Clock.Now()
	h := http.Header{}
	for k, v := range w.cfg.Headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/json")
	key := call.Key()
	h.Set(HeaderIdempotencyKey, key)
	h.Set(HeaderSignature, SignHMAC(w.cfg.Secret, now, body))
	// Standard Webhooks names are lower-case in the spec; set them verbatim.
	h[HeaderID] = []string{key}
	h[HeaderTimestamp] = []string{strconv.FormatInt(now.Unix(), 10)}
	h[HeaderSignatureV1] = []string{SignStandard(w.cfg.Secret, key, now, body)}
	return httpadapter.Request{Method: http.MethodPost, URL: w.url.String(), Headers: h, Body: body, Timeout: w.cfg.Timeout}, nil
}

// Func is the tool callback. A 2xx answer's JSON body is the result (an empty body is {}, any
// other body is {"status", "body"}); a non-2xx answer is an http_error tool error, retryable for
// 429 and 5xx with Retry-After; transport failures and timeouts are retryable.
func (w *Webhook) Func() tools.Func {
	return func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
		if call.ToolCallID == "" {
			return nil, errors.New("webhook call without a tool_call_id: the idempotency key is required")
		}
		req, err := w.Request(call, args)
		if err != nil {
			return nil, err
		}
		res, aerr := httpadapter.Invoke(ctx, w.adapter, req, httpadapter.CallContext{ToolCallID: call.ToolCallID, Key: call.Key(), ConversationID: call.ConversationID, Tool: w.cfg.Tool, Attempt: call.Attempt})
		if aerr != nil {
			// Webhook URLs often carry a secret path (chat hooks): the model reads the tool's
			// name instead of the URL.
			aerr.Message = strings.ReplaceAll(aerr.Message, httpadapter.RedactURL(w.url), "webhook "+w.cfg.Tool)
			if d := aerr.Details; d != nil {
				delete(d, "headers")
				delete(d, "url")
			}
			return nil, aerr.ToolError()
		}
		status, _ := res.Payload["status"].(int)
		if status < 200 || status > 299 {
			// 1xx never reaches here; 3xx is not followed and is not success.
			e := fault.Errorf(fault.KindHTTPError, "webhook %s answered %d %s", w.cfg.Tool, status, http.StatusText(status))
			e.Details = map[string]any{"status": status}
			return nil, e
		}
		switch body := res.Payload["body"].(type) {
		case string:
			if body == "" {
				return map[string]any{}, nil
			}
			if truncated, _ := res.Payload["body_truncated"].(bool); !truncated && json.Valid([]byte(body)) {
				if v, err := tools.DecodeJSON([]byte(body)); err == nil {
					return v, nil
				}
			}
			return map[string]any{"status": status, "body": body, "body_truncated": res.Payload["body_truncated"]}, nil
		default:
			return body, nil
		}
	}
}

// DryRun describes the POST a call would make. The plan is shown on approval cards to people
// who need not hold the endpoint's secret: it names the scheme and host, never the path or
// query, which for chat and automation hooks are the credential.
func (w *Webhook) DryRun() tools.DryRunFunc {
	return func(ctx context.Context, call tools.Call, args map[string]any) (tools.Plan, error) {
		shown := (&url.URL{Scheme: w.url.Scheme, Host: w.url.Host}).String()
		if w.url.Path != "" && w.url.Path != "/" || w.url.RawQuery != "" {
			shown += "/…"
		}
		return tools.Plan{
			Summary: fmt.Sprintf("Would POST the arguments to %s (webhook %s)", shown, w.cfg.Tool),
			Details: map[string]any{"url": shown, "arguments": args},
		}, nil
	}
}
