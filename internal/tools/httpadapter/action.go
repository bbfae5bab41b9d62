package httpadapter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/tools"
)

// ActionKey is the registry key of the runtime-authored HTTP action.
const ActionKey = "http.request"

// Bounds of the action.
const (
	DefaultMaxBodyBytes = 16 << 10 // a persisted body, when max_body_bytes is not given
	MaxTimeout          = 5 * time.Minute
	// readBound caps what is read of a body that is not persisted (trailers need the end).
	readBound = 64 << 10
)

// ActionOptions is the host's policy for http.request tools. AllowedHosts is required.
type ActionOptions struct {
	// AllowedHosts are the only hosts a request may target (exact, case-insensitive, no port).
	// A listed private IP literal may be dialed although private; listed localhost (or a
	// *.localhost name) may reach loopback addresses only; any other listed name that resolves
	// to a non-public address is refused at dial time unless AllowPrivateNetwork is set, so DNS
	// rebinding cannot reach the internal network.
	AllowedHosts        []string
	AllowPrivateNetwork bool
	// AllowBody permits a raw string body (json bodies are always allowed).
	AllowBody bool
	// AllowSlashInPath lets a url_template placeholder's value span path segments ("a/b" is sent
	// as the two segments a and b, each escaped; an empty, "." or ".." segment is still refused).
	// Without it a value holding "/" is refused: sent as %2F, a target that decodes it before
	// routing would let the model walk its paths.
	AllowSlashInPath bool
	// PersistResponseBody keeps response and error bodies in results, bounded by MaxBodyBytes.
	PersistResponseBody bool
	MaxBodyBytes        int
	// Credentials resolves credential_refs at the transport boundary.
	Credentials CredentialResolver
	// Client sends the requests; nil builds NewClient(DialPolicyFor(opts)).
	Client *http.Client
	// Clock reads "now" for an HTTP-date Retry-After; nil uses the wall clock.
	Clock clock.Clock
}

// DialPolicyFor derives the dial policy of an http.request tool from its options.
func DialPolicyFor(opts ActionOptions) DialPolicy {
	p := DialPolicy{AllowPrivateNetwork: opts.AllowPrivateNetwork}
	for _, h := range opts.AllowedHosts {
		if IsPrivateLiteral(h) {
			p.PrivateHosts = append(p.PrivateHosts, h)
		}
	}
	return p
}

// Problem is one validation problem: a JSON pointer relative to the validated map and a message.
type Problem = fault.Problem

// ValidationError lists every problem of a request at once.
type ValidationError struct{ Problems []Problem }

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		path := p.Path
		if path == "" {
			path = "/"
		}
		msgs[i] = path + ": " + p.Message
	}
	return "invalid http.request: " + strings.Join(msgs, "; ")
}

// ActionRequest is a structurally valid request map.
type ActionRequest struct {
	Method         string
	URL            *url.URL  // a fixed URL, or
	Template       *Template // a url_template
	Headers        map[string]string
	Query          map[string]string // values may hold {{ name }} placeholders
	Body           *string
	JSON           any
	Timeout        time.Duration
	CredentialRefs []string
	// AllowSlashInPath is ActionOptions.AllowSlashInPath, for Build.
	AllowSlashInPath bool
}

// Host is the request's fixed target host, lower-case, without port.
func (r *ActionRequest) Host() string {
	if r.Template != nil {
		return r.Template.Host()
	}
	return normalizeHost(r.URL.Hostname())
}

// Placeholders lists every {{ name }} the request uses, sorted.
func (r *ActionRequest) Placeholders() []string {
	set := map[string]bool{}
	if r.Template != nil {
		for _, n := range r.Template.Names() {
			set[n] = true
		}
	}
	for _, v := range r.Query {
		for _, n := range TextNames(v) {
			set[n] = true
		}
	}
	walkStrings(r.JSON, func(s string) {
		for _, n := range TextNames(s) {
			set[n] = true
		}
	})
	if r.Body != nil {
		for _, n := range TextNames(*r.Body) {
			set[n] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

var credentialRefRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// hopHeaders are set by the transport, never by a request map.
var hopHeaders = map[string]bool{"host": true, "content-length": true, "transfer-encoding": true, "connection": true, "te": true, "upgrade": true, "idempotency-key": true}

// ValidateRequest checks a request map's structure, without policy: method plus exactly one of
// url and url_template, known keys only, no userinfo or query string in the URL, well-formed
// placeholders, no secret-bearing headers or payload keys, not both body and json.
func ValidateRequest(req map[string]any) (*ActionRequest, error) {
	r, problems := parseRequest(req)
	if len(problems) > 0 {
		return nil, &ValidationError{Problems: problems}
	}
	return r, nil
}

// ValidateRequestWithPolicy checks the structure and the host's policy: allowed_hosts present
// and containing the target host, a raw body only with allow_body, credential references only
// with a resolver.
func ValidateRequestWithPolicy(req map[string]any, opts ActionOptions) (*ActionRequest, error) {
	r, problems := parseRequest(req)
	problems = append(problems, policyProblems(r, opts)...)
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Path < problems[j].Path })
		return nil, &ValidationError{Problems: problems}
	}
	r.AllowSlashInPath = opts.AllowSlashInPath
	return r, nil
}

// ValidateActionInput is the check run before an attempt is recorded: the request against the
// policy, then its expansion with the call's bindings (the model's arguments).
func ValidateActionInput(req map[string]any, bindings map[string]any, opts ActionOptions) error {
	r, err := ValidateRequestWithPolicy(req, opts)
	if err != nil {
		return err
	}
	_, err = r.Build(bindings)
	return err
}

func policyProblems(r *ActionRequest, opts ActionOptions) []Problem {
	var out []Problem
	if len(opts.AllowedHosts) == 0 {
		out = append(out, Problem{Path: "", Message: "allowed_hosts is required: list the hosts this request may reach"})
	} else if r != nil {
		if !hostAllowed(r.Host(), opts.AllowedHosts) {
			path := "/url"
			if r.Template != nil {
				path = "/url_template"
			}
			out = append(out, Problem{Path: path, Message: fmt.Sprintf("host %q is not in allowed_hosts", r.Host())})
		}
	}
	if r == nil {
		return out
	}
	if r.Body != nil && !opts.AllowBody {
		out = append(out, Problem{Path: "/body", Message: "a raw string body needs allow_body; send structured data with json"})
	}
	if len(r.CredentialRefs) > 0 && opts.Credentials == nil {
		out = append(out, Problem{Path: "/credential_refs", Message: "credential references need a credential resolver, and none is configured"})
	}
	return out
}

// parseRequest returns the parsed request (nil when a problem makes it unusable) and every
// problem found.
func parseRequest(m map[string]any) (*ActionRequest, []Problem) {
	var ps []Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	r := &ActionRequest{}
	if m == nil {
		return nil, []Problem{{Path: "", Message: "the request must be an object"}}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	queryKey := ""
	for _, k := range keys {
		v := m[k]
		p := "/" + escapePointer(k)
		switch k {
		case "method":
			s, ok := v.(string)
			if !ok || !validMethod(strings.ToUpper(s)) {
				add(p, "method must be one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
				continue
			}
			r.Method = strings.ToUpper(s)
		case "url":
			s, ok := v.(string)
			if !ok {
				add(p, "url must be a string")
				continue
			}
			if placeholderRE.MatchString(s) || strings.Contains(s, "{{") {
				add(p, "url must be fixed: use url_template for placeholders")
				continue
			}
			u, err := CheckURL(s)
			if err != nil {
				add(p, "%v", err)
				continue
			}
			r.URL = u
		case "url_template":
			s, ok := v.(string)
			if !ok {
				add(p, "url_template must be a string")
				continue
			}
			t, err := ParseTemplate(s)
			if err != nil {
				add(p, "%v", err)
				continue
			}
			r.Template = t
		case "headers":
			hm, ok := v.(map[string]any)
			if !ok {
				add(p, "headers must be an object of strings")
				continue
			}
			r.Headers = map[string]string{}
			for hk, hv := range hm {
				hp := p + "/" + escapePointer(hk)
				s, ok := hv.(string)
				switch {
				case !ok:
					add(hp, "a header value must be a string")
				case !validHeaderName(hk) || strings.ContainsAny(s, "\r\n\x00"):
					add(hp, "not a valid header")
				case IsSensitiveHeader(hk) || LooksLikeCredential(s):
					add(hp, "header %q carries secrets: name a credential in credential_refs instead", hk)
				case hopHeaders[strings.ToLower(hk)]:
					add(hp, "header %q is set by the transport", hk)
				case strings.Contains(s, "{{"):
					add(hp, "headers are fixed: placeholders are not expanded in headers")
				default:
					r.Headers[http.CanonicalHeaderKey(hk)] = s
				}
			}
		case "query_params", "params":
			if queryKey != "" {
				add(p, "give either query_params or params, not both")
				continue
			}
			queryKey = k
			qm, ok := v.(map[string]any)
			if !ok {
				add(p, "%s must be an object", k)
				continue
			}
			r.Query = map[string]string{}
			for qk, qv := range qm {
				qp := p + "/" + escapePointer(qk)
				s, err := scalarString(qv)
				switch {
				case err != nil:
					add(qp, "a query value must be a string, number or boolean")
				case IsSensitiveKey(qk):
					add(qp, "query key %q carries secrets: name a credential in credential_refs instead", qk)
				case !wellFormedText(s):
					add(qp, "a placeholder is malformed: write {{ name }}")
				default:
					r.Query[qk] = s
				}
			}
		case "body":
			s, ok := v.(string)
			if !ok {
				add(p, "body must be a string (use json for structured data)")
				continue
			}
			if !wellFormedText(s) {
				add(p, "a placeholder is malformed: write {{ name }}")
				continue
			}
			r.Body = &s
		case "json":
			r.JSON = v
			for _, sp := range sensitivePaths(v, p) {
				add(sp, "payload key carries secrets: name a credential in credential_refs instead")
			}
			walkStrings(v, func(s string) {
				if !wellFormedText(s) {
					add(p, "a placeholder in json is malformed: write {{ name }}")
				}
			})
		case "timeout":
			secs, ok := toFloat(v)
			if !ok || secs <= 0 || time.Duration(secs*float64(time.Second)) > MaxTimeout {
				add(p, "timeout must be a number of seconds above 0 and at most %d", int(MaxTimeout/time.Second))
				continue
			}
			r.Timeout = time.Duration(secs * float64(time.Second))
		case "credential_refs":
			arr, ok := v.([]any)
			if !ok {
				add(p, "credential_refs must be an array of reference names")
				continue
			}
			for i, e := range arr {
				s, ok := e.(string)
				if !ok || !credentialRefRE.MatchString(s) {
					add(p+"/"+strconv.Itoa(i), "a credential reference is a name of letters, digits, '_', '.', ':' or '-'")
					continue
				}
				r.CredentialRefs = append(r.CredentialRefs, s)
			}
		default:
			add(p, "unknown request key %q", k)
		}
	}
	if _, ok := m["method"]; !ok {
		add("/method", "method is required")
	}
	_, hasURL := m["url"]
	_, hasTemplate := m["url_template"]
	switch {
	case hasURL && hasTemplate:
		add("", "give either url or url_template, not both")
	case !hasURL && !hasTemplate:
		add("", "url or url_template is required")
	}
	if r.Body != nil && r.JSON != nil {
		add("/body", "give either body or json, not both")
	}
	if len(ps) > 0 {
		if r.URL == nil && r.Template == nil {
			return nil, ps
		}
		return r, ps
	}
	return r, nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", c) {
			return false
		}
	}
	return true
}

// wellFormedText reports whether every "{{" or "}}" in s belongs to a {{ name }} placeholder.
func wellFormedText(s string) bool {
	rest := placeholderRE.ReplaceAllString(s, "")
	return !strings.Contains(rest, "{{") && !strings.Contains(rest, "}}")
}

func walkStrings(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
	case map[string]any:
		for _, e := range x {
			walkStrings(e, f)
		}
	case []any:
		for _, e := range x {
			walkStrings(e, f)
		}
	}
}

// Build expands the request with bindings (the model's arguments) into the adapter's Request.
// Path placeholders are escaped as path segments, query values by the query encoder; a json
// string that is exactly one placeholder takes the binding's value as is (numbers stay numbers),
// other strings are interpolated. The expanded json is checked again for secret-bearing keys.
func (r *ActionRequest) Build(bindings map[string]any) (Request, error) {
	out := Request{Method: r.Method, Timeout: r.Timeout, CredentialRefs: r.CredentialRefs}
	if r.Template != nil {
		u, err := r.Template.expand(bindings, r.AllowSlashInPath)
		if err != nil {
			return out, err
		}
		out.URL = u
	} else {
		out.URL = r.URL.String()
	}
	if len(r.Headers) > 0 {
		out.Headers = http.Header{}
		for k, v := range r.Headers {
			out.Headers.Set(k, v)
		}
	}
	if len(r.Query) > 0 {
		out.Params = url.Values{}
		for k, v := range r.Query {
			s, err := ExpandText(v, bindings)
			if err != nil {
				return out, fmt.Errorf("query %q: %w", k, err)
			}
			out.Params.Set(k, s)
		}
	}
	if r.Body != nil {
		s, err := ExpandText(*r.Body, bindings)
		if err != nil {
			return out, fmt.Errorf("body: %w", err)
		}
		out.Body = []byte(s)
	}
	if r.JSON != nil {
		v, err := expandJSON(r.JSON, bindings)
		if err != nil {
			return out, fmt.Errorf("json: %w", err)
		}
		if sp := sensitivePaths(v, ""); len(sp) > 0 {
			sort.Strings(sp)
			return out, fmt.Errorf("json: key at %s carries secrets", sp[0])
		}
		out.JSON = v
	}
	return out, nil
}

func expandJSON(v any, bindings map[string]any) (any, error) {
	switch x := v.(type) {
	case string:
		if m := placeholderRE.FindStringSubmatchIndex(x); m != nil && m[0] == 0 && m[1] == len(x) {
			val, ok := bindings[x[m[2]:m[3]]]
			if !ok {
				return nil, fmt.Errorf("placeholder {{ %s }} has no value", x[m[2]:m[3]])
			}
			return val, nil
		}
		return ExpandText(x, bindings)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			ev, err := expandJSON(e, bindings)
			if err != nil {
				return nil, err
			}
			out[k] = ev
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			ev, err := expandJSON(e, bindings)
			if err != nil {
				return nil, err
			}
			out[i] = ev
		}
		return out, nil
	}
	return v, nil
}

// Action is a validated http.request tool: one request map under one policy.
type Action struct {
	req     *ActionRequest
	opts    ActionOptions
	adapter *HTTP
}

// NewAction validates req with opts (every problem at once) and prepares the adapter.
func NewAction(req map[string]any, opts ActionOptions) (*Action, error) {
	r, err := ValidateRequestWithPolicy(req, opts)
	if err != nil {
		return nil, err
	}
	if opts.PersistResponseBody && opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	client := opts.Client
	if client == nil {
		client = NewClient(DialPolicyFor(opts))
	}
	limit := int64(readBound)
	if opts.PersistResponseBody {
		limit = int64(opts.MaxBodyBytes)
	}
	return &Action{req: r, opts: opts, adapter: &HTTP{Client: client, Clock: opts.Clock, MaxResponseBytes: limit, Credentials: opts.Credentials}}, nil
}

// Request is the validated request.
func (a *Action) Request() *ActionRequest { return a.req }

// Func is the tool callback: expand the request with the model's arguments, check it again,
// send it once, and answer {"http_response": …} or a tool error (Retryable for timeouts, 429,
// 5xx and connection failures), redacted and with bodies only when persisted (and then with
// the values of secret-bearing JSON keys redacted).
func (a *Action) Func() tools.Func {
	return func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
		req, err := a.req.Build(args)
		if err != nil {
			return nil, fault.New(fault.KindInvalidArgs, err.Error(), nil)
		}
		res, aerr := Invoke(ctx, a.adapter, req, CallContext{ToolCallID: call.ToolCallID, Key: call.Key(), ConversationID: call.ConversationID, Attempt: call.Attempt})
		if aerr != nil {
			if aerr.Details != nil {
				if a.opts.PersistResponseBody {
					aerr.Details["body"] = RedactKeys(aerr.Details["body"])
				} else {
					delete(aerr.Details, "body")
					delete(aerr.Details, "body_truncated")
				}
			}
			return nil, aerr.ToolError()
		}
		resp := map[string]any{
			"status":   res.Payload["status"],
			"headers":  res.Payload["headers"],
			"trailers": res.Payload["trailers"],
		}
		if a.opts.PersistResponseBody {
			// A persisted JSON body goes to the log and the model: a token it carries (an
			// OAuth answer's access_token) is redacted like a request's secret keys.
			resp["body"] = RedactKeys(res.Payload["body"])
			resp["body_truncated"] = res.Payload["body_truncated"]
		}
		return map[string]any{"http_response": resp}, nil
	}
}

// DryRun describes the request a call would send, without sending it.
func (a *Action) DryRun() tools.DryRunFunc {
	return func(ctx context.Context, call tools.Call, args map[string]any) (tools.Plan, error) {
		req, err := a.req.Build(args)
		if err != nil {
			return tools.Plan{}, fault.New(fault.KindInvalidArgs, err.Error(), nil)
		}
		u, perr := url.Parse(req.URL)
		if perr != nil {
			return tools.Plan{}, fmt.Errorf("dry run: %w", perr)
		}
		if len(req.Params) > 0 {
			u.RawQuery = req.Params.Encode()
		}
		shown := RedactURL(u)
		details := map[string]any{"method": req.Method, "url": shown}
		if req.JSON != nil {
			details["json"] = req.JSON
		}
		if len(req.CredentialRefs) > 0 {
			details["credential_refs"] = req.CredentialRefs
		}
		return tools.Plan{Summary: fmt.Sprintf("Would send %s %s", req.Method, shown), Details: details}, nil
	}
}

// Precheck is the check run before an attempt is recorded (ValidateActionInput for the
// validated request): the host's policy again, then the request expanded with the call's
// arguments. A host outside allowed_hosts is a blocked_host tool error; any other problem is
// invalid_args with the problems in details. It sends nothing. Use it as tools.Spec.Precheck.
func (a *Action) Precheck(ctx context.Context, args map[string]any) error {
	if a == nil || a.req == nil {
		return errNoRequest
	}
	if ps := policyProblems(a.req, a.opts); len(ps) > 0 {
		ve := &ValidationError{Problems: ps}
		kind := fault.KindInvalidArgs
		for _, p := range ps {
			if p.Path == "/url" || p.Path == "/url_template" || p.Path == "" {
				kind = fault.KindBlockedHost
			}
		}
		return &fault.Error{Kind: kind, Message: ve.Error(), Problems: ps}
	}
	req, err := a.req.Build(args)
	if err != nil {
		return fault.New(fault.KindInvalidArgs, err.Error(), nil)
	}
	// The expanded URL is what will be dialed: check its host too, not only the template's.
	u, err := CheckURL(req.URL)
	if err != nil {
		return fault.New(fault.KindInvalidArgs, "the expanded URL is not valid: "+err.Error(), nil)
	}
	if !hostAllowed(normalizeHost(u.Hostname()), a.opts.AllowedHosts) {
		return fault.Errorf(fault.KindBlockedHost, "host %q is not in allowed_hosts", u.Hostname())
	}
	return nil
}

func hostAllowed(host string, allowed []string) bool {
	for _, h := range allowed {
		if normalizeHost(h) == host {
			return true
		}
	}
	return false
}

// errNoRequest keeps the zero Action from being used by accident.
var errNoRequest = errors.New("http.request action has no request")

// Validate runs the per-attempt check for args: the expansion succeeds and stays in policy.
func (a *Action) Validate(args map[string]any) error {
	if a == nil || a.req == nil {
		return errNoRequest
	}
	_, err := a.req.Build(args)
	return err
}
