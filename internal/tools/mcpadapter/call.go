package mcpadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
// the reason logged.
func (s *server) refresh(ctx context.Context, cs *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	var built []*tools.Tool
	n := 0
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		if n++; n > maxTools {
			s.log.Warn("mcp server lists too many tools; the rest are ignored", "max", maxTools)
			break
		}
		if !s.cfg.allows(t.Name) {
			continue
		}
		tool, err := s.build(t)
		if err != nil {
			s.log.Warn("mcp tool skipped", "tool", bounded(t.Name, 100), "reason", err)
			continue
		}
		built = append(built, tool)
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
	readOnly := t.Annotations != nil && t.Annotations.ReadOnlyHint
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
		Approval:    s.cfg.approval(remote, readOnly),
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

type inflightKey struct{}

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
		res, err := cs.CallTool(context.WithValue(ctx, inflightKey{}, in), params)
		if err != nil {
			return nil, s.callError(ctx, cs, in, err)
		}
		return result(res)
	}
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

// elicit puts a server's question to the owner of the conversation whose call asks it. Under
// the 2026-07-28 protocol the question comes back with the call (an input-required result), so
// ctx is the call's; under an older one the server asks on the session, with nothing that names
// the call, so the question is put to the only call under way, or declined when there is not
// exactly one.
func (s *server) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	in, _ := ctx.Value(inflightKey{}).(*inflight)
	if in == nil {
		s.mu.Lock()
		if len(s.inflight) == 1 {
			for _, only := range s.inflight {
				in = only
			}
		}
		s.mu.Unlock()
	}
	if in == nil || in.call.Ask == nil {
		s.log.Warn("mcp server asked a question no call can take; declined")
		return &mcp.ElicitResult{Action: "decline"}, nil
	}
	p := req.Params
	q := tools.Question{Message: bounded(p.Message, maxQuestionText)}
	if p.Mode == "url" {
		if len(p.URL) > maxURLBytes || !(strings.HasPrefix(p.URL, "https://") || strings.HasPrefix(p.URL, "http://")) {
			err := fault.New(fault.KindCommandFailed, "the MCP server asked the user to open a link that is not an http(s) URL (or is too long)", nil)
			in.setAskErr(err)
			return nil, err
		}
		q.URL = clean(p.URL)
	} else {
		q.Schema = json.RawMessage(`{"type":"object","properties":{}}`)
		if p.RequestedSchema != nil {
			b, err := json.Marshal(p.RequestedSchema)
			if err != nil {
				in.setAskErr(err)
				return nil, fmt.Errorf("encode the requested schema: %w", err)
			}
			q.Schema = b
		}
	}
	// An older server asks on the session, whose handler context does not end with the call.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(in.ctx, cancel)()
	ans, err := in.call.Ask(ctx, q)
	if err != nil {
		in.setAskErr(err)
		return nil, err
	}
	return &mcp.ElicitResult{Action: ans.Action, Content: ans.Content}, nil
}
