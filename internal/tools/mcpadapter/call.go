package mcpadapter

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"parley/internal/fault"
	"parley/internal/tools"
)

// MetaIdempotencyKey is the _meta key of a call's idempotency key (tools.Call.Key): the same on
// every attempt, after restarts and from any process.
const MetaIdempotencyKey = "parley/idempotency_key"

// Bounds on what a server declares.
const (
	maxTools          = 256       // tools taken from one server's list
	maxDescription    = 4000      // bytes of a tool's description kept for the model
	maxSchemaBytes    = 64 << 10  // a larger input schema skips the tool
	maxContentItems   = 64        // content blocks kept from one result
	maxProgressQueued = 16        // progress lines waiting for the conversation (then dropped)
	maxProgressText   = 500       // bytes of one progress line
	maxQuestionText   = 4000      // bytes of an elicitation's message
	maxURLBytes       = 2048      // bytes of a URL-mode elicitation's link
	sourcePrefix      = "mcp:"    // the registry source of a server's tools
	maxStructuredJSON = 256 << 10 // structured content larger than this is kept as truncated text
)

// refresh lists the server's tools and replaces its tools in the registry. A tool that is not
// allowed is left out; one that cannot be a Parley tool (its name, its schema) is skipped with
// the reason logged. A list past Config.MaxListBytes (every page together, as re-encoded) or
// maxListPages fails the refresh, and with it the session.
func (s *server) refresh(ctx context.Context, cs *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	var built []*tools.Tool
	var opened []string // tools the server's trusted read-only hint made auto
	n, size, cursor := 0, 0, ""
	for page := 1; ; page++ {
		if page > maxListPages {
			return fmt.Errorf("list tools: %w: more than %d pages", ErrListTooLarge, maxListPages)
		}
		res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		b, err := json.Marshal(res)
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		if size += len(b); size > s.cfg.maxList() {
			return fmt.Errorf("list tools: %w: more than %d bytes", ErrListTooLarge, s.cfg.maxList())
		}
		for _, t := range res.Tools {
			if n++; n > maxTools {
				break
			}
			if t == nil || !s.cfg.allows(t.Name) {
				continue
			}
			tool, err := s.build(t)
			if err != nil {
				s.log.Warn("mcp tool skipped", "tool", bounded(t.Name, 100), "reason", err)
				continue
			}
			built = append(built, tool)
			if _, byHint := s.cfg.approval(t.Name, readOnlyHint(t)); byHint {
				opened = append(opened, tool.Name())
			}
		}
		if res.NextCursor == "" || n > maxTools {
			break
		}
		cursor = res.NextCursor
	}
	if n > maxTools {
		s.log.Warn("mcp server lists too many tools; the rest are ignored", "max", maxTools)
	}
	if !slices.Equal(opened, s.opened) {
		// The operator chose to trust this server's annotations: say which tools that opened,
		// once for each list that opens a different set.
		if len(opened) > 0 {
			s.log.Warn("mcp tools run without approval on the server's read-only hint (trust_annotations)", "tools", opened)
		}
		s.opened = opened
	}
	if err := s.m.opts.Registry.SetSource(sourcePrefix+s.cfg.Name, built); err != nil {
		s.log.Warn("mcp tools not registered", "err", err)
	}
	s.mu.Lock()
	s.nTools = len(built)
	s.mu.Unlock()
	return nil
}

// build makes the server's tool t a Parley server tool named "<server>__<tool>".
func (s *server) build(t *mcp.Tool) (*tools.Tool, error) {
	name := s.cfg.Name + Separator + t.Name
	if !toolNameRE(name) {
		return nil, fmt.Errorf("the name %q does not make a tool name models accept (1-64 letters, digits, '_' or '-', with the server's prefix)", name)
	}
	params, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	if len(params) > maxSchemaBytes {
		return nil, fmt.Errorf("input schema is %d bytes (at most %d)", len(params), maxSchemaBytes)
	}
	if string(params) == "null" {
		params = nil
	}
	readOnly := readOnlyHint(t)
	approval, _ := s.cfg.approval(t.Name, readOnly)
	desc := t.Description
	if desc == "" && t.Annotations != nil {
		desc = t.Annotations.Title
	}
	attempts := s.cfg.MaxAttempts
	if attempts <= 0 {
		attempts = 3
	}
	remote := t.Name
	tool, err := tools.New(tools.Spec{
		Name:        name,
		Description: bounded(fmt.Sprintf("[MCP server %s] %s", s.cfg.Name, desc), maxDescription),
		Parameters:  params,
		Executor:    tools.Server,
		Approval:    approval,
		Streaming:   true,
		Timeout:     s.cfg.Timeout,
		MaxAttempts: attempts,
		Func:        s.callFunc(remote),
		DryRun: func(_ context.Context, _ tools.Call, args map[string]any) (tools.Plan, error) {
			return tools.Plan{
				Summary: fmt.Sprintf("Would call the tool %s of the MCP server %s", remote, s.cfg.Name),
				Details: map[string]any{"server": s.cfg.Name, "tool": remote, "arguments": args, "read_only_hint": readOnly},
			}, nil
		},
	})
	if err != nil {
		var de *tools.DefinitionError
		if errors.As(err, &de) {
			return nil, errors.New(de.Rule + causeOf(de.Err))
		}
		return nil, err
	}
	return tool, nil
}

// readOnlyHint is the server's claim that t has no side effects (a hint, trusted only with
// Config.TrustAnnotations).
func readOnlyHint(t *mcp.Tool) bool { return t.Annotations != nil && t.Annotations.ReadOnlyHint }

func causeOf(err error) string {
	if err == nil {
		return ""
	}
	return ": " + bounded(err.Error(), 500)
}

func toolNameRE(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// inflight is one call under way: where its progress goes and who its questions are for.
type inflight struct {
	ctx      context.Context // the call's: a question outlives neither it nor the call
	call     tools.Call
	progress chan string // bounded (maxProgressQueued); overflow drops the newest line

	mu     sync.Mutex
	askErr error // guarded by mu: why a question could not be asked
}

func (in *inflight) setAskErr(err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.askErr == nil {
		in.askErr = err
	}
}

func (in *inflight) getAskErr() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.askErr
}

// callFunc runs a call of the server's tool remote: the current session, the call's
// idempotency key in _meta, a progress token of its own, and the result mapped to Parley's
// envelope.
func (s *server) callFunc(remote string) tools.Func {
	return func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
		cs, lastErr := s.current()
		if cs == nil {
			msg := fmt.Sprintf("the MCP server %s is not connected", s.cfg.Name)
			if lastErr != "" {
				msg += " (" + lastErr + ")"
			}
			e := fault.New(fault.KindServiceUnavailable, msg+"; try again later", map[string]any{"server": s.cfg.Name})
			e.Retryable = true
			return nil, e
		}
		token := call.Key() + "/" + strconv.Itoa(call.Attempt)
		in := &inflight{ctx: ctx, call: call, progress: make(chan string, maxProgressQueued)}
		s.mu.Lock()
		s.inflight[token] = in
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.inflight, token)
			s.mu.Unlock()
		}()
		// The forwarder owns delivering progress to the call; it stops when the call returns.
		stop := make(chan struct{})
		forwarded := make(chan struct{})
		go func() {
			defer close(forwarded)
			for {
				select {
				case msg := <-in.progress:
					if call.Progress != nil {
						call.Progress(msg)
					}
				case <-stop:
					// What came before the result is delivered before the call returns.
					for {
						select {
						case msg := <-in.progress:
							if call.Progress != nil {
								call.Progress(msg)
							}
						default:
							return
						}
					}
				}
			}
		}()
		defer func() {
			close(stop)
			<-forwarded
		}()
		if args == nil {
			args = map[string]any{}
		}
		params := &mcp.CallToolParams{Name: remote, Arguments: args, Meta: mcp.Meta{MetaIdempotencyKey: call.Key()}}
		params.SetProgressToken(token)
		if call.Resumed != nil {
			if err := resumeParams(params, call.Resumed); err != nil {
				// Not ours any more to read (a state from another version): the call starts
				// over, and the server asks again.
				s.log.Warn("mcp call could not resume from its stored question; calling afresh", "err", err)
				params.InputResponses, params.RequestState = nil, ""
			}
		}
		for round := 1; ; round++ {
			res, err := cs.CallTool(ctx, params)
			if err != nil {
				return nil, s.callError(ctx, cs, in, err)
			}
			if !res.NeedsInput() {
				return result(res)
			}
			if round >= maxRounds {
				return nil, fault.New(fault.KindCommandFailed, fmt.Sprintf("the MCP server %s asked for input %d times in one call", s.cfg.Name, round), nil)
			}
			responses, err := s.fulfil(ctx, in, res)
			if err != nil {
				return nil, err
			}
			next := *params
			next.InputResponses, next.RequestState = responses, res.RequestState
			params = &next
		}
	}
}

// The 2026-07-28 protocol's questions (multi round-trip requests): the server answers a call
// with an input-required result (its questions and an opaque request state) and the client
// calls again with the answers and that state. The adapter runs this loop itself (the SDK's is
// turned off) so that each question belongs to its call, and so that a question can be kept
// with the pending call: the request state is all the server needs to carry on, so a question
// asked before Parley restarted is answered after it (tools.Question.Resume, tools.Call.Resumed).

// Bounds on one call's questions.
const (
	maxRounds        = 10       // input-required results in one call (the SDK's own loop stops at 10)
	maxInputRequests = 8        // questions in one input-required result
	maxRequestState  = 64 << 10 // bytes of request state kept with a question; more cannot survive a restart
	maxRequestID     = 200      // bytes of an input request's id
)

// resumeState is a question's Resume: the request state to echo, the answers already given to
// the other questions of the same round, and which question this one is.
type resumeState struct {
	RequestState string                     `json:"request_state,omitempty"` // base64: the server's opaque bytes, stored as they came
	Responses    map[string]json.RawMessage `json:"responses,omitempty"`
	ID           string                     `json:"id"`
}

// fulfil asks the owner each question of an input-required result, in a stable order, and
// returns the answers for the next round.
func (s *server) fulfil(ctx context.Context, in *inflight, res *mcp.CallToolResult) (mcp.InputResponseMap, error) {
	if len(res.InputRequests) == 0 {
		e := fault.New(fault.KindServiceUnavailable, fmt.Sprintf("the MCP server %s is busy (it asked for input without a question); try again later", s.cfg.Name), map[string]any{"server": s.cfg.Name})
		e.Retryable = true
		return nil, e
	}
	if len(res.InputRequests) > maxInputRequests {
		return nil, fault.New(fault.KindCommandFailed, fmt.Sprintf("the MCP server %s asked %d questions at once (at most %d)", s.cfg.Name, len(res.InputRequests), maxInputRequests), nil)
	}
	ids := make([]string, 0, len(res.InputRequests))
	for id := range res.InputRequests {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make(mcp.InputResponseMap, len(ids))
	given := map[string]json.RawMessage{}
	for _, id := range ids {
		p, ok := res.InputRequests[id].(*mcp.ElicitParams)
		if !ok || p == nil {
			return nil, fault.New(fault.KindCommandFailed, fmt.Sprintf("the MCP server %s asked for an input Parley does not offer (sampling or roots; it offers questions to the user only)", s.cfg.Name), nil)
		}
		q, err := question(p)
		if err != nil {
			return nil, err
		}
		if len(res.RequestState) <= maxRequestState && len(id) <= maxRequestID {
			q.Resume, _ = json.Marshal(resumeState{RequestState: base64.StdEncoding.EncodeToString([]byte(res.RequestState)), Responses: maps.Clone(given), ID: id})
		}
		ans, err := s.ask(ctx, in, q)
		if err != nil {
			return nil, err
		}
		r := &mcp.ElicitResult{Action: ans.Action, Content: ans.Content}
		out[id] = r
		if given[id], err = json.Marshal(r); err != nil {
			return nil, fmt.Errorf("encode an answer: %w", err)
		}
	}
	return out, nil
}

// resumeParams makes params the next round of a call whose question (state) was answered (r)
// after the run that asked it was lost.
func resumeParams(params *mcp.CallToolParams, r *tools.Resumed) error {
	var st resumeState
	if err := json.Unmarshal(r.State, &st); err != nil {
		return fmt.Errorf("decode the stored question: %w", err)
	}
	state, err := base64.StdEncoding.DecodeString(st.RequestState)
	if err != nil {
		return fmt.Errorf("decode the stored request state: %w", err)
	}
	responses := make(mcp.InputResponseMap, len(st.Responses)+1)
	for id, b := range st.Responses {
		var er mcp.ElicitResult
		if err := json.Unmarshal(b, &er); err != nil {
			return fmt.Errorf("decode a stored answer: %w", err)
		}
		responses[id] = &er
	}
	responses[st.ID] = &mcp.ElicitResult{Action: r.Answer.Action, Content: r.Answer.Content}
	params.InputResponses, params.RequestState = responses, string(state)
	return nil
}

// question checks a server's question as Parley will show it: a form from its schema, or an
// http(s) link (never fetched or followed by Parley).
func question(p *mcp.ElicitParams) (tools.Question, error) {
	q := tools.Question{Message: bounded(p.Message, maxQuestionText)}
	if p.Mode == "url" {
		u, err := url.Parse(p.URL)
		if len(p.URL) > maxURLBytes || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return q, fault.New(fault.KindCommandFailed, "the MCP server asked the user to open a link that is not an http(s) URL (or is too long)", nil)
		}
		q.URL = clean(p.URL)
		return q, nil
	}
	q.Schema = json.RawMessage(`{"type":"object","properties":{}}`)
	if p.RequestedSchema != nil {
		b, err := json.Marshal(p.RequestedSchema)
		if err != nil {
			return q, fault.New(fault.KindCommandFailed, "the MCP server's question has a schema that is not JSON", nil)
		}
		if err := checkFormBounds(b); err != nil {
			return q, fault.New(fault.KindCommandFailed, "the MCP server's question was refused: "+err.Error(), nil)
		}
		q.Schema = b
	}
	return q, nil
}

// Bounds of a server's question form, checked before anything is asked, stored or shown.
const (
	maxFormBytes      = 64 << 10 // bytes of the form's schema, as JSON
	maxFormFields     = 64       // properties of one form (or of any object in it)
	maxFormEnum       = 100      // values of an enum (or items of any array in the schema)
	maxFormLabelBytes = 1 << 10  // bytes of a title or description, or of a value in an enum (or any array)
)

// checkFormBounds refuses a form schema that exceeds the bounds above, naming the first excess.
func checkFormBounds(b []byte) error {
	if len(b) > maxFormBytes {
		return fmt.Errorf("its form schema is %d bytes (at most %d)", len(b), maxFormBytes)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return errors.New("its form schema is not JSON")
	}
	return walkForm(v, "")
}

func walkForm(v any, path string) error {
	switch v := v.(type) {
	case map[string]any:
		if props, ok := v["properties"].(map[string]any); ok && len(props) > maxFormFields {
			return fmt.Errorf("its form has %d fields (at most %d)", len(props), maxFormFields)
		}
		keys := slices.Sorted(maps.Keys(v))
		for _, k := range keys {
			at := path + "/" + bounded(k, 100)
			if s, ok := v[k].(string); ok && (k == "title" || k == "description") && len(s) > maxFormLabelBytes {
				return fmt.Errorf("its form's %s at %s is %d bytes (at most %d)", k, cmp.Or(path, "/"), len(s), maxFormLabelBytes)
			}
			if err := walkForm(v[k], at); err != nil {
				return err
			}
		}
	case []any:
		if len(v) > maxFormEnum {
			return fmt.Errorf("its form's %s has %d values (at most %d)", path, len(v), maxFormEnum)
		}
		for i, x := range v {
			if s, ok := x.(string); ok && len(s) > maxFormLabelBytes {
				return fmt.Errorf("its form's value at %s/%d is %d bytes (at most %d)", path, i, len(s), maxFormLabelBytes)
			}
			if err := walkForm(x, fmt.Sprintf("%s/%d", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ask puts q to the owner of the call in; an error is the call's error.
func (s *server) ask(ctx context.Context, in *inflight, q tools.Question) (tools.Answer, error) {
	if in.call.Ask == nil {
		return tools.Answer{}, fault.New(fault.KindCommandFailed, "the MCP server asked the user a question, and this call cannot ask one", nil)
	}
	// A question outlives neither the call nor the session's handler context.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(in.ctx, cancel)()
	ans, err := in.call.Ask(ctx, q)
	if err == nil {
		return ans, nil
	}
	if in.ctx.Err() != nil {
		return tools.Answer{}, fmt.Errorf("mcp call: %w", in.ctx.Err())
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return tools.Answer{}, fe
	}
	return tools.Answer{}, fault.New(fault.KindCommandFailed, "the MCP server's question could not be asked: "+bounded(err.Error(), 500), nil)
}

// callError turns a failed call into what the loop understands: the deadline's or the stop's
// own error, a question that could not be asked, the server's refusal, or a retryable
// transport failure (after which the supervisor reconnects).
func (s *server) callError(ctx context.Context, cs *mcp.ClientSession, in *inflight, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("mcp call: %w", ctx.Err())
	}
	if askErr := in.getAskErr(); askErr != nil {
		var fe *fault.Error
		if errors.As(askErr, &fe) {
			return fe
		}
		return fault.New(fault.KindCommandFailed, "the MCP server's question could not be asked: "+bounded(askErr.Error(), 500), nil)
	}
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) {
		kind := fault.KindCommandFailed
		switch rpc.Code {
		case jsonrpc.CodeInvalidParams:
			kind = fault.KindInvalidArgs
		case jsonrpc.CodeMethodNotFound:
			kind = fault.KindUnknownTool
		}
		return fault.New(kind, fmt.Sprintf("the MCP server %s refused the call: %s", s.cfg.Name, bounded(clean(rpc.Message), 1000)), map[string]any{"code": rpc.Code})
	}
	// Only a failure on the session in use rings: a call that failed on a session the
	// supervisor already replaced must not tear the fresh one down.
	if cur, _ := s.current(); cur == cs {
		ring(s.broken)
	}
	e := fault.New(fault.KindNetwork, fmt.Sprintf("the connection to the MCP server %s failed during the call: %s", s.cfg.Name, bounded(clean(err.Error()), 500)), map[string]any{"server": s.cfg.Name})
	e.Retryable = true
	return e
}

// result maps an MCP result to a tool result: isError becomes a command_failed tool error;
// otherwise a lone text block is the result itself, and anything else is
// {"content": [...], "structured_content": ...}. Text is made storable and bounded; binary
// blocks (images, audio, blobs) are described, never passed on.
func result(res *mcp.CallToolResult) (any, error) {
	content := mapContent(res.Content)
	if res.IsError {
		msg := "the tool reported an error"
		if t := firstText(res.Content); t != "" {
			msg = t
		}
		return nil, fault.New(fault.KindCommandFailed, bounded(clean(msg), 2000), map[string]any{"content": content})
	}
	if res.StructuredContent == nil && len(content) == 1 && content[0]["type"] == "text" {
		return content[0]["text"], nil
	}
	out := map[string]any{"content": content}
	if res.StructuredContent != nil {
		out["structured_content"] = structured(res.StructuredContent)
	}
	return out, nil
}

func firstText(cs []mcp.Content) string {
	for _, c := range cs {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text
		}
	}
	return ""
}

// maxTextBytes bounds one text block. The envelope is bounded again (to the tool's output
// bound) when the call finishes; this keeps a hostile server's megabytes out of memory.
const maxTextBytes = 64 << 10

func mapContent(cs []mcp.Content) []map[string]any {
	out := make([]map[string]any, 0, min(len(cs), maxContentItems))
	for i, c := range cs {
		if i == maxContentItems {
			out = append(out, map[string]any{"type": "omitted", "count": len(cs) - i})
			break
		}
		switch x := c.(type) {
		case *mcp.TextContent:
			out = append(out, map[string]any{"type": "text", "text": tools.Truncate(clean(x.Text), maxTextBytes)})
		case *mcp.ImageContent:
			out = append(out, map[string]any{"type": "image", "mime_type": bounded(clean(x.MIMEType), 100), "bytes": len(x.Data)})
		case *mcp.AudioContent:
			out = append(out, map[string]any{"type": "audio", "mime_type": bounded(clean(x.MIMEType), 100), "bytes": len(x.Data)})
		case *mcp.ResourceLink:
			out = append(out, map[string]any{"type": "resource_link", "uri": bounded(clean(x.URI), 2000), "name": bounded(clean(x.Name), 200)})
		case *mcp.EmbeddedResource:
			m := map[string]any{"type": "resource"}
			if r := x.Resource; r != nil {
				m["uri"], m["mime_type"] = bounded(clean(r.URI), 2000), bounded(clean(r.MIMEType), 100)
				if r.Text != "" {
					m["text"] = tools.Truncate(clean(r.Text), maxTextBytes)
				}
				if len(r.Blob) > 0 {
					m["bytes"] = len(r.Blob)
				}
			}
			out = append(out, m)
		default:
			out = append(out, map[string]any{"type": "unknown"})
		}
	}
	return out
}

// structured keeps structured content as decoded JSON with storable strings, or as truncated
// JSON text when it is too large.
func structured(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return "structured content that is not JSON"
	}
	if len(b) > maxStructuredJSON {
		return tools.Truncate(clean(string(b)), maxTextBytes)
	}
	d, err := tools.DecodeJSON([]byte(clean(string(b))))
	if err != nil {
		return tools.Truncate(clean(string(b)), maxTextBytes)
	}
	return cleanValue(d)
}

func cleanValue(v any) any {
	switch x := v.(type) {
	case string:
		return clean(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[clean(k)] = cleanValue(e)
		}
		return out
	case []any:
		for i := range x {
			x[i] = cleanValue(x[i])
		}
	}
	return v
}

// clean makes s text every store keeps (tools.StorableText); bounded also cuts it to n bytes.
func clean(s string) string { return tools.StorableText(s) }

func bounded(s string, n int) string { return tools.BoundedText(s, n) }

// progress forwards a progress notification to its call. The SDK's reader must not wait on the
// conversation, so a line that finds the call's queue full is dropped (and counted).
func (s *server) progress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p := req.Params
	tok, _ := p.ProgressToken.(string)
	s.mu.Lock()
	in := s.inflight[tok]
	s.mu.Unlock()
	if in == nil {
		return
	}
	msg := p.Message
	if msg == "" {
		msg = strconv.FormatFloat(p.Progress, 'f', -1, 64)
		if p.Total > 0 {
			msg += " / " + strconv.FormatFloat(p.Total, 'f', -1, 64)
		}
	}
	select {
	case in.progress <- bounded(msg, maxProgressText):
	default:
		progressDropped.WithLabelValues(s.cfg.Name).Inc()
	}
}

// elicit takes a question a server asks on the session (protocols before 2026-07-28, where a
// server sends an elicitation request while a call runs): nothing in the message itself names
// the call it belongs to, so it goes to the call whose response stream it came on (over
// streamable HTTP: stream.go), else to the call its _meta names (the call's progress token, or
// its idempotency key, which the server got with the call), else to the only call under way;
// with several calls under way and nothing naming one it is declined. Under the 2026-07-28
// protocol questions come back with their call (fulfil).
func (s *server) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	in := s.owner(req.Params.GetMeta())
	if in == nil {
		s.log.Warn("mcp server asked a question no call can take; declined")
		return &mcp.ElicitResult{Action: "decline"}, nil
	}
	q, err := question(req.Params)
	if err != nil {
		// Refused before anything is asked or stored; the server hears why.
		in.setAskErr(err)
		msg := err.Error()
		var fe *fault.Error
		if errors.As(err, &fe) {
			msg = fe.Message
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: bounded(msg, 500)}
	}
	ans, err := s.ask(ctx, in, q)
	if err == nil {
		return &mcp.ElicitResult{Action: ans.Action, Content: ans.Content}, nil
	}
	in.setAskErr(err)
	return nil, err
}

// owner finds the call under way a session-level question belongs to (see elicit).
func (s *server) owner(meta map[string]any) *inflight {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range []string{metaCall, "progressToken"} {
		if tok, ok := meta[k].(string); ok && s.inflight[tok] != nil {
			return s.inflight[tok]
		}
	}
	if key, ok := meta[MetaIdempotencyKey].(string); ok && key != "" {
		for _, in := range s.inflight {
			if in.call.Key() == key {
				return in
			}
		}
	}
	if len(s.inflight) == 1 {
		for _, only := range s.inflight {
			return only
		}
	}
	return nil
}
