package tools

import (
	"context"
	"encoding/json"
	"errors"
)

// Question is what a running server call asks the conversation's owner (an MCP server's
// elicitation): a form built from Schema, or, when URL is set, a link to open and a "done".
type Question struct {
	Message string
	Schema  json.RawMessage // the form (the restricted elicitation subset); empty for a URL question
	URL     string          // a URL-mode question's link (http or https)
	// Resume, when set, is what the tool needs to carry on from this question's answer in a
	// later run (a restart of Parley lost the goroutine that asked): opaque, storable JSON
	// kept with the pending question and handed back in Call.Resumed with the answer. A
	// question without it cannot survive a restart (the attempt fails and the call runs
	// again). For an MCP server this is the 2026-07-28 protocol's request state.
	Resume json.RawMessage
}

// Resumed is a question's Resume state and the answer it got after the run that asked it was
// lost: the tool carries on from there instead of asking again.
type Resumed struct {
	State  json.RawMessage
	Answer Answer
}

// Answer is the owner's answer to a Question.
type Answer struct {
	Action  string         // accept, decline or cancel
	Content map[string]any // the form's values when accepted
}

// AskFunc puts q to the owner and waits for the answer, or until ctx ends. The call is shown as
// pending (kind elicitation) meanwhile, answered through the same Resolve as every suspension,
// and bounded by the tool's suspension timeout rather than its run timeout.
type AskFunc func(ctx context.Context, q Question) (Answer, error)

// ErrCannotAsk is returned by an AskFunc that cannot reach anyone (a dry run, a call run
// outside a conversation).
var ErrCannotAsk = errors.New("this call cannot ask the user a question")
