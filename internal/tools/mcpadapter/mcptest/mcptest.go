// Package mcptest is a real MCP server, written with the same SDK as the adapter, for tests:
// tools that read, write, fail, ask the user (form and URL elicitations, the 2026-07-28 way:
// an input-required result), report progress, hang, crash, and misbehave (a huge result with
// NUL bytes and invalid UTF-8, an invalid input schema, a name no model accepts).
package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// EnvServe is the variable that makes a test binary serve MCP over stdio (see ServeIfChild).
const EnvServe = "MCPTEST_SERVE"

// EnvListBytes, beside EnvServe, makes the child's tools/list that many bytes larger in tools of
// EnvToolBytes each (AddBigTools; default 1 MiB); EnvPageSize sets how many tools one page of its
// list holds.
const (
	EnvListBytes = "MCPTEST_LIST_BYTES"
	EnvToolBytes = "MCPTEST_TOOL_BYTES"
	EnvPageSize  = "MCPTEST_PAGE_SIZE"
)

// ServeHTTP and ServeHTTPJSON, as the value of EnvServe, make the child serve streamable HTTP on
// a loopback port instead of stdio (the second answering with application/json rather than
// SSE); it writes its URL as the first line of its standard output. They keep a hostile
// server's memory out of the measured process (measure_test.go).
const (
	ServeHTTP     = "http"
	ServeHTTPJSON = "http-json"
)

// ServeIfChild serves the test server over stdio and exits when the process was started with
// EnvServe=1 (a TestMain calls it first): a test re-executes its own binary as the server.
func ServeIfChild() {
	mode := os.Getenv(EnvServe)
	if mode == "" {
		return
	}
	pageSize, _ := strconv.Atoi(os.Getenv(EnvPageSize))
	s := NewServerWith(mode == "1", &mcp.ServerOptions{PageSize: pageSize})
	if n, _ := strconv.Atoi(os.Getenv(EnvListBytes)); n > 0 {
		each, _ := strconv.Atoi(os.Getenv(EnvToolBytes))
		AddBigTools(s, n, each)
	}
	var err error
	switch mode {
	case ServeHTTP, ServeHTTPJSON:
		err = serveHTTP(s, mode == ServeHTTPJSON)
	default:
		err = s.Run(context.Background(), &mcp.StdioTransport{MaxLineLength: -1})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serveHTTP(s *mcp.Server, jsonResponse bool) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("http://%s\n", l.Addr())
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{JSONResponse: jsonResponse})
	// The parent ends the child by closing its standard input.
	go func() {
		_, _ = os.Stdin.Read(make([]byte, 1))
		os.Exit(0)
	}()
	return http.Serve(l, h) //nolint:gosec // a test server on loopback
}

// AddBigTools adds tools whose descriptions come to about n bytes, each bytes or less each (0:
// 1 MiB): a tools/list far beyond what a client should read.
func AddBigTools(s *mcp.Server, n, each int) {
	if each <= 0 {
		each = 1 << 20
	}
	for i := 0; n > 0; i++ {
		size := min(n, each)
		n -= size
		s.AddTool(&mcp.Tool{Name: fmt.Sprintf("big_%d", i), Description: strings.Repeat("d", size), InputSchema: objectSchema},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("big"), nil })
	}
}

// AskState is the "ask" tool's request state: opaque text that PostgreSQL would not keep as
// text (a NUL), which the client must echo back unchanged.
const AskState = "asked\x00é1"

// HugeBytes is the size of the "huge" tool's text.
const HugeBytes = 2 << 20

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func args(req *mcp.CallToolRequest) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(req.Params.Arguments, &m)
	return m
}

var objectSchema = json.RawMessage(`{"type":"object"}`)

// HangFor is how long the "hang" tool waits for its call to be cancelled before it answers
// after all: far past every test's timeout of the call, short enough for a cleanup.
const HangFor = 5 * time.Second

// NewServer builds the test server; crash adds the tool that kills the process (stdio only).
func NewServer(crash bool) *mcp.Server { return NewServerWith(crash, nil) }

// NewServerWith is NewServer with the SDK's server options (a page size).
func NewServerWith(crash bool, opts *mcp.ServerOptions) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "1"}, opts)
	s.AddTool(&mcp.Tool{Name: "lookup", Description: "Look a word up (read-only).",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(fmt.Sprintf("found: %v", args(req)["q"])), nil
		})
	s.AddTool(&mcp.Tool{Name: "write", Description: "Write a value (side effect).",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"},"value":{"type":"string"}},"required":["key"]}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			a := args(req)
			return &mcp.CallToolResult{
				Content:           []mcp.Content{&mcp.TextContent{Text: "written"}},
				StructuredContent: map[string]any{"written": a["key"], "idempotency_key": req.Params.GetMeta()["parley/idempotency_key"]},
			}, nil
		})
	s.AddTool(&mcp.Tool{Name: "fail", Description: "Always fails.", InputSchema: objectSchema},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the disk is full"}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "ask", Description: "Asks the user's name, then greets them.", InputSchema: objectSchema},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r, ok := req.Params.InputResponses["name"].(*mcp.ElicitResult)
			if !ok {
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"name": &mcp.ElicitParams{
					Message:         "What is your name?",
					RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","title":"Name"}},"required":["name"]}`),
				}}, RequestState: AskState}, nil
			}
			// Stateless between rounds, as the protocol intends: the state must come back as sent.
			if req.Params.RequestState != AskState {
				return nil, fmt.Errorf("the request state came back as %q", req.Params.RequestState)
			}
			if r.Action != "accept" {
				return text("no name: " + r.Action), nil
			}
			return text(fmt.Sprintf("hello %v", r.Content["name"])), nil
		})
	s.AddTool(&mcp.Tool{Name: "ask_url", Description: "Sends the user to a page.", InputSchema: objectSchema},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r, ok := req.Params.InputResponses["auth"].(*mcp.ElicitResult)
			if !ok {
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"auth": &mcp.ElicitParams{
					Mode: "url", Message: "Authorize the test app", URL: "https://auth.example.test/authorize?x=1", ElicitationID: "e1",
				}}}, nil
			}
			return text("url: " + r.Action), nil
		})
	s.AddTool(&mcp.Tool{Name: "ask_bad_url", Description: "Sends the user to a link that is not http(s).", InputSchema: objectSchema},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if _, ok := req.Params.InputResponses["go"]; ok {
				return text("followed"), nil
			}
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"go": &mcp.ElicitParams{
				Mode: "url", Message: "Click", URL: "javascript:alert(document.cookie)", ElicitationID: "e2",
			}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "ask_huge", Description: "Asks with a hostile form (argument shape: one of HostileForms).", InputSchema: shapeSchema},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if _, ok := req.Params.InputResponses["form"]; ok {
				return text("answered"), nil
			}
			shape, _ := args(req)["shape"].(string)
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"form": &mcp.ElicitParams{
				Message: "Fill this in", RequestedSchema: HostileForm(shape),
			}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "progress", Description: "Reports progress three times.", InputSchema: objectSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			for i := 1; i <= 3; i++ {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: 3, Message: fmt.Sprintf("step %d", i)})
				// The work between reports. Over streamable HTTP the client handles a
				// notification apart from the result, so one sent just before the result may
				// arrive after the call ended (and is dropped); real progress precedes real work.
				select {
				case <-time.After(20 * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return text("done"), nil
		})
	s.AddTool(&mcp.Tool{Name: "hang", Description: "Never answers.", InputSchema: objectSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			// Bounded in real time: when the client's cancellation does not reach the server
			// (it races the session's close), the SDK's session close waits for this handler,
			// and with it the test server's Close; a hang without end would hang the test.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(HangFor):
				return text("gave up hanging"), nil
			}
		})
	s.AddTool(&mcp.Tool{Name: "huge", Description: "A hostile result.", InputSchema: objectSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			big := strings.Repeat("x", HugeBytes)
			return &mcp.CallToolResult{
				Content: []mcp.Content{
					&mcp.TextContent{Text: "nul\x00byte and bad \xff utf8 " + big},
					&mcp.ImageContent{MIMEType: "image/png", Data: []byte("\x89PNG fake")},
				},
				StructuredContent: map[string]any{"k\x00ey": "v\x00al"},
			}, nil
		})
	s.AddTool(&mcp.Tool{Name: "bad_schema", Description: "Its schema does not compile.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"no-such-type"}}}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("never"), nil })
	s.AddTool(&mcp.Tool{Name: "bad.name", Description: "A name with a dot.", InputSchema: objectSchema},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("never"), nil })
	if crash {
		s.AddTool(&mcp.Tool{Name: "crash", Description: "Kills the server mid-call.", InputSchema: objectSchema,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				fmt.Fprintln(os.Stderr, "mcptest: crashing on purpose")
				os.Exit(3)
				return nil, nil
			})
	}
	return s
}

// HostileForms are the shapes of HostileForm: a form too large, with too many fields, an enum
// too long, a title too long, an enum value too long.
var HostileForms = []string{"bytes", "fields", "enum", "title", "enum value"}

var shapeSchema = json.RawMessage(`{"type":"object","properties":{"shape":{"type":"string"}}}`)

// HostileForm is an elicitation form schema of the given shape (see HostileForms), each
// otherwise within the MCP elicitation subset.
func HostileForm(shape string) json.RawMessage {
	props := map[string]any{}
	switch shape {
	case "bytes": // about 160 KB in 20 fields: past the form's bound, within a message's
		for i := range 20 {
			props[fmt.Sprintf("f%d", i)] = map[string]any{"type": "string", "default": strings.Repeat("x", 8<<10)}
		}
	case "fields":
		for i := range 200 { // small enough to pass the bytes bound
			props[fmt.Sprintf("f%d", i)] = map[string]any{"type": "string"}
		}
	case "enum":
		enum := make([]string, 1000)
		for i := range enum {
			enum[i] = fmt.Sprintf("v%d", i)
		}
		props["pick"] = map[string]any{"type": "string", "enum": enum}
	case "enum value":
		props["pick"] = map[string]any{"type": "string", "enum": []string{"short", strings.Repeat("V", 4<<10)}}
	case "title":
		props["name"] = map[string]any{"type": "string", "title": strings.Repeat("T", 4<<10)}
	default:
		props["ok"] = map[string]any{"type": "string"}
	}
	b, _ := json.Marshal(map[string]any{"type": "object", "properties": props})
	return b
}

// AddLateTool adds a tool after clients connected, so they hear that the list changed.
func AddLateTool(s *mcp.Server) {
	s.AddTool(&mcp.Tool{Name: "late", Description: "Added after start.", InputSchema: objectSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("late"), nil })
}

// NewLegacyServer builds a server that speaks only the protocol before 2026-07-28, where a
// server asks its questions on the session while the call runs: "ask_named" names its call in
// the question's _meta (its progress token); "ask_anon" does not.
func NewLegacyServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest-legacy", Version: "1"},
		&mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	askOn := func(named bool) mcp.ToolHandler {
		return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			p := &mcp.ElicitParams{Message: fmt.Sprintf("Which colour for %v?", args(req)["item"]),
				RequestedSchema: json.RawMessage(`{"type":"object","properties":{"colour":{"type":"string"}},"required":["colour"]}`)}
			if named {
				p.Meta = mcp.Meta{"progressToken": req.Params.GetProgressToken()}
			}
			r, err := req.Session.Elicit(ctx, p)
			if err != nil {
				return nil, err
			}
			if r.Action != "accept" {
				return text(fmt.Sprintf("%v: %s", args(req)["item"], r.Action)), nil
			}
			return text(fmt.Sprintf("%v is %v", args(req)["item"], r.Content["colour"])), nil
		}
	}
	schema := json.RawMessage(`{"type":"object","properties":{"item":{"type":"string"}},"required":["item"]}`)
	s.AddTool(&mcp.Tool{Name: "ask_named", Description: "Asks a colour, naming its call.", InputSchema: schema}, askOn(true))
	s.AddTool(&mcp.Tool{Name: "ask_anon", Description: "Asks a colour.", InputSchema: schema}, askOn(false))
	// ask_huge asks a hostile form on the session and reports what the client answered.
	s.AddTool(&mcp.Tool{Name: "ask_huge", Description: "Asks with a hostile form.", InputSchema: shapeSchema},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			shape, _ := args(req)["shape"].(string)
			r, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Fill this in", RequestedSchema: HostileForm(shape)})
			if err != nil {
				return text("refused: " + err.Error()), nil
			}
			return text("answered: " + r.Action), nil
		})
	return s
}

// FloodListChanged makes s send each of its tools/list_changed notifications n times, back to
// back (the SDK's server coalesces a burst of changes into one): a server that floods its
// clients with list changes. It returns the count of notifications sent.
func FloodListChanged(s *mcp.Server, n int) *atomic.Int64 {
	var sent atomic.Int64
	s.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "notifications/tools/list_changed" {
				return next(ctx, method, req)
			}
			for range n - 1 {
				if _, err := next(ctx, method, req); err != nil {
					return nil, err
				}
				sent.Add(1)
			}
			res, err := next(ctx, method, req)
			sent.Add(1)
			return res, err
		}
	})
	return &sent
}

// CountLists counts the tools/list requests s receives (each page is one).
func CountLists(s *mcp.Server) *atomic.Int64 {
	var lists atomic.Int64
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" {
				lists.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	return &lists
}
