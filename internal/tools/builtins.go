package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // get_current_time must know IANA zones on a machine without zoneinfo

	"parley/internal/clock"
	"parley/internal/fault"
)

// Email is a message send_email writes to the outbox.
type Email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

// Outbox receives send_email's messages. Send must be idempotent on the call (call.Key, or its
// conversation and tool_call_id together; a tool_call_id alone repeats across conversations): a call
// re-dispatched after a crash carries the same id, and its second Send must write nothing and
// return the first message's id (the store's AddOutbox is; the wiring adapts it).
type Outbox interface {
	Send(ctx context.Context, call Call, msg Email) (id string, err error)
}

// BuiltinDeps is what the built-in tools need from the app.
type BuiltinDeps struct {
	// Clock is read by get_current_time and paces count_down; nil is the wall clock.
	Clock clock.Clock
	// Outbox receives send_email's messages; send_email is left out when it is nil.
	Outbox Outbox
	// CountDownStep is the pause between count_down's steps; 0 is one second.
	CountDownStep time.Duration
	// TestTools adds the tools that exist to exercise the app (echo, failing, count_down,
	// deploy): the demo model uses them; a real model is not offered them unless the operator
	// asks.
	TestTools bool
}

// Builtins returns the built-in tools: get_current_time, ask_user, geolocation, send_email
// (when deps.Outbox is set) and web_search, and with deps.TestTools echo, failing,
// count_down and deploy.
func Builtins(deps BuiltinDeps) []*Tool {
	clk := deps.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	ts := []*Tool{GetCurrentTime(clk)}
	if deps.TestTools {
		ts = append(ts, Echo(), Failing())
	}
	ts = append(ts, AskUser(), Geolocation())
	if deps.Outbox != nil {
		ts = append(ts, SendEmail(deps.Outbox))
	}
	if deps.TestTools {
		ts = append(ts, CountDown(clk, deps.CountDownStep), Deploy())
	}
	return append(ts, WebSearch())
}

// mustNew builds a built-in; its declaration is fixed, so a refusal is a programming error
// that every test run catches.
func mustNew(s Spec) *Tool {
	t, err := New(s)
	if err != nil {
		panic(err)
	}
	return t
}

// Time formats of get_current_time.
const (
	TimeISO8601 = "iso8601"
	TimeUnix    = "unix"
	TimeHuman   = "human"
)

// GetCurrentTime is the server tool get_current_time: the clock's time as iso8601 (RFC 3339,
// the default), unix seconds or a human sentence, in UTC or an IANA time zone. An unknown zone
// is an invalid_args tool error the model can correct.
func GetCurrentTime(clk clock.Clock) *Tool {
	return mustNew(Spec{
		Name:        "get_current_time",
		Description: "Get the current date and time, optionally in an IANA time zone such as Europe/Paris.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "format": {"type": "string", "enum": ["iso8601", "unix", "human"], "description": "iso8601 (default), unix seconds, or a human-readable sentence"},
    "timezone": {"type": "string", "description": "An IANA time zone name such as America/New_York; UTC when omitted"}
  },
  "additionalProperties": false
}`),
		Executor: Server,
		Func: func(ctx context.Context, call Call, args map[string]any) (any, error) {
			format, _ := args["format"].(string)
			if format == "" {
				format = TimeISO8601
			}
			zone, _ := args["timezone"].(string)
			if zone == "" {
				zone = "UTC"
			}
			loc, err := loadZone(zone)
			if err != nil {
				return nil, fault.InvalidAt(fmt.Sprintf("unknown time zone %q: use an IANA name such as Europe/Paris", zone), "/timezone", err.Error())
			}
			now := clk.Now().In(loc)
			res := map[string]any{"format": format, "timezone": loc.String()}
			switch format {
			case TimeUnix:
				res["time"] = now.Unix()
			case TimeHuman:
				res["time"] = now.Format("Monday, 2 January 2006, 15:04:05 MST")
			default:
				res["time"] = now.Format(time.RFC3339)
			}
			return res, nil
		},
	})
}

// loadZone loads an IANA zone. "Local" is refused: it is the server's zone, which means
// nothing to the person asking.
func loadZone(name string) (*time.Location, error) {
	if name == "Local" || strings.TrimSpace(name) != name {
		return nil, errors.New("not an IANA time zone name")
	}
	return time.LoadLocation(name)
}

// Echo is the server tool echo: it returns its text (for tests and demos).
func Echo() *Tool {
	return mustNew(Spec{
		Name:        "echo",
		Description: "Return the given text unchanged.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {"text": {"type": "string", "description": "The text to echo"}},
  "required": ["text"],
  "additionalProperties": false
}`),
		Executor: Server,
		Func: func(ctx context.Context, call Call, args map[string]any) (any, error) {
			text, _ := args["text"].(string)
			return map[string]any{"text": text}, nil
		},
	})
}

// Failing is the server tool failing: it always fails with a command_failed tool error (for
// tests and demos). With "retryable": true the error is retryable, so the loop's retry
// scheduler tries it again (up to three attempts in all).
func Failing() *Tool {
	return mustNew(Spec{
		Name:        "failing",
		Description: "Always fails; used to test error handling.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "message": {"type": "string", "description": "The failure message"},
    "retryable": {"type": "boolean", "description": "Whether the failure may be retried"}
  },
  "additionalProperties": false
}`),
		Executor:    Server,
		MaxAttempts: 3,
		Func: func(ctx context.Context, call Call, args map[string]any) (any, error) {
			msg, _ := args["message"].(string)
			if msg == "" {
				msg = "this tool always fails"
			}
			e := fault.New(fault.KindCommandFailed, msg, map[string]any{"attempt": call.Attempt})
			e.Retryable, _ = args["retryable"].(bool)
			return nil, e
		},
	})
}

// askUserParameters describes the elicitation subset to the model, so it can write a form
// CheckElicitationSchema accepts.
const askUserParameters = `{
  "type": "object",
  "properties": {
    "message": {"type": "string", "minLength": 1, "description": "The question to ask the user"},
    "schema": {
      "type": "object",
      "description": "A flat form: an object schema whose properties are string (optionally with enum, or format email, uri, date or date-time), number, integer or boolean",
      "properties": {
        "type": {"const": "object"},
        "title": {"type": "string"},
        "description": {"type": "string"},
        "properties": {
          "type": "object",
          "minProperties": 1,
          "additionalProperties": {
            "type": "object",
            "properties": {
              "type": {"enum": ["string", "number", "integer", "boolean"]},
              "title": {"type": "string"},
              "description": {"type": "string"},
              "default": {"type": ["string", "number", "integer", "boolean"]},
              "enum": {"type": "array", "items": {"type": "string"}, "minItems": 1},
              "enumNames": {"type": "array", "items": {"type": "string"}},
              "format": {"enum": ["email", "uri", "date", "date-time"]},
              "minLength": {"type": "integer", "minimum": 0},
              "maxLength": {"type": "integer", "minimum": 0},
              "minimum": {"type": "number"},
              "maximum": {"type": "number"}
            },
            "required": ["type"],
            "additionalProperties": false
          }
        },
        "required": {"type": "array", "items": {"type": "string"}}
      },
      "required": ["type", "properties"],
      "additionalProperties": false
    }
  },
  "required": ["message", "schema"],
  "additionalProperties": false
}`

// AskUser is the human tool ask_user: it asks the conversation's owner a question with a small
// form (the restricted JSON Schema subset of MCP elicitation); the answer is the result.
func AskUser() *Tool {
	return mustNew(Spec{
		Name:        "ask_user",
		Description: "Ask the user a question with a small form and wait for the answer. Use it when you need information only the user has.",
		Parameters:  json.RawMessage(askUserParameters),
		Executor:    Human,
	})
}

// Geolocation is the client tool geolocation: the owner's browser reports its position. The
// result is user-controllable, so it is validated against the result schema (latitude,
// longitude and accuracy, nothing else) and never trusted for a privileged decision.
func Geolocation() *Tool {
	return mustNew(Spec{
		Name:        "geolocation",
		Description: "Get the user's current location from their browser.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {"high_accuracy": {"type": "boolean", "description": "Ask the device for its most accurate position"}},
  "additionalProperties": false
}`),
		Executor: Client,
		ResultSchema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "latitude": {"type": "number", "minimum": -90, "maximum": 90},
    "longitude": {"type": "number", "minimum": -180, "maximum": 180},
    "accuracy": {"type": "number", "minimum": 0}
  },
  "required": ["latitude", "longitude", "accuracy"],
  "additionalProperties": false
}`),
	})
}

// SendEmail is the server tool send_email: gated (the owner approves), its effect is a message
// in the outbox, written once per tool_call_id. Its dry run shows the full message.
func SendEmail(outbox Outbox) *Tool {
	return mustNew(Spec{
		Name:        "send_email",
		Description: "Send an email. The user approves each message before it is sent.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "to": {"type": "string", "format": "email", "description": "The recipient's address"},
    "subject": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[^\\r\\n]*$", "description": "One line"},
    "body": {"type": "string", "maxLength": 20000, "description": "Plain text"}
  },
  "required": ["to", "subject", "body"],
  "additionalProperties": false
}`),
		Executor:  Server,
		Approval:  RequiresApproval,
		Approvers: ByOwner,
		Func: func(ctx context.Context, call Call, args map[string]any) (any, error) {
			msg := emailFrom(args)
			if call.DryRun {
				return emailPlan(msg), nil
			}
			if call.ToolCallID == "" {
				return nil, errors.New("send_email: no tool_call_id to key the outbox write on")
			}
			id, err := outbox.Send(ctx, call, msg)
			if err != nil {
				return nil, fmt.Errorf("send_email: outbox: %w", err)
			}
			return map[string]any{"id": id, "status": "queued", "to": msg.To, "subject": msg.Subject}, nil
		},
		DryRun: func(ctx context.Context, call Call, args map[string]any) (Plan, error) {
			return emailPlan(emailFrom(args)), nil
		},
	})
}

func emailFrom(args map[string]any) Email {
	var m Email
	m.To, _ = args["to"].(string)
	m.Subject, _ = args["subject"].(string)
	m.Body, _ = args["body"].(string)
	return m
}

func emailPlan(m Email) Plan {
	return Plan{
		Summary: fmt.Sprintf("Would send an email to %s with the subject %q", m.To, m.Subject),
		Details: map[string]any{"to": m.To, "subject": m.Subject, "body": m.Body},
	}
}

// CountDown is the streaming server tool count_down: it counts down from "from" (default 3,
// at most 10), reporting each number through call.Progress, one step per pause on the clock.
// A cancelled or expired context stops it between steps.
func CountDown(clk clock.Clock, step time.Duration) *Tool {
	if step <= 0 {
		step = time.Second
	}
	return mustNew(Spec{
		Name:        "count_down",
		Description: "Count down from a number, reporting each step as progress; shows a streaming tool.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {"from": {"type": "integer", "minimum": 1, "maximum": 10, "description": "Where to start (default 3)"}},
  "additionalProperties": false
}`),
		Executor:  Server,
		Streaming: true,
		Func: func(ctx context.Context, call Call, args map[string]any) (any, error) {
			from := int64(3)
			if f, ok := args["from"].(int64); ok {
				from = f
			}
			for n := from; n > 0; n-- {
				// Arm the step's timer before reporting it, so whoever sees the progress line
				// (a test driving a fake clock) knows the tool is already waiting.
				t := clk.NewTimer(step)
				call.Progress(fmt.Sprint(n))
				select {
				case <-ctx.Done():
					t.Stop()
					return nil, fmt.Errorf("count_down stopped at %d: %w", n, ctx.Err())
				case <-t.C():
				}
			}
			return map[string]any{"counted_from": from, "done": true}, nil
		},
	})
}

// Deploy is the demo's reviewer-gated server tool deploy: it pretends to deploy a service to
// staging or production. It exists so the demo shows a reviewer at work: its calls wait for a
// reviewer (or an admin) who is not the conversation's owner, the same governance a tools file
// declares with "approvers": "reviewer". It has no effect beyond its result.
func Deploy() *Tool {
	return mustNew(Spec{
		Name:        "deploy",
		Description: "Deploy a service to staging or production. A reviewer, not the user, approves each deployment.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "service": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,39}$", "description": "The service's name"},
    "environment": {"type": "string", "enum": ["staging", "production"], "description": "Where to deploy it"}
  },
  "required": ["service", "environment"],
  "additionalProperties": false
}`),
		Executor:  Server,
		Approval:  RequiresApproval,
		Approvers: ByReviewer,
		Func: func(ctx context.Context, call Call, args map[string]any) (any, error) {
			service, env := deployFrom(args)
			if call.DryRun {
				return deployPlan(service, env), nil
			}
			return map[string]any{"service": service, "environment": env, "status": "deployed"}, nil
		},
		DryRun: func(ctx context.Context, call Call, args map[string]any) (Plan, error) {
			return deployPlan(deployFrom(args)), nil
		},
	})
}

func deployFrom(args map[string]any) (service, env string) {
	service, _ = args["service"].(string)
	env, _ = args["environment"].(string)
	return service, env
}

func deployPlan(service, env string) Plan {
	return Plan{
		Summary: fmt.Sprintf("Would deploy %s to %s", service, env),
		Details: map[string]any{"service": service, "environment": env},
	}
}

// WebSearchNative is Anthropic's hosted web search tool definition.
const WebSearchNative = `{"type":"web_search_20250305","name":"web_search","max_uses":3}`

// WebSearch is the provider tool web_search: Anthropic runs it in-stream and its result comes
// back in the stream. It is exported to Anthropic only (its native format); an OpenAI-format
// model never sees it.
func WebSearch() *Tool {
	return mustNew(Spec{
		Name:         "web_search",
		Description:  "Search the web (run by the model provider).",
		Executor:     Provider,
		Native:       json.RawMessage(WebSearchNative),
		NativeFormat: FormatAnthropic,
	})
}
