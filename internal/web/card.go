package web

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/internal/tools"
	"parley/views"
)

// This file is a card's form (an approval's decision, a question's answers) read once into the
// agent's Resolution, and the agent's refusal put back beside the card's fields. The card's
// fields are sent as text: the agent types them by the call's schemas (agent.Resolution's
// ArgFields and Answers), so reading the form needs no view of the call.

// card is a card's form as read.
type card struct {
	res agent.Resolution
	// values are the card's own fields (decision, reason, args, the argument fields, remember
	// …), answers a question's, by property name: what a re-rendered card shows again.
	values, answers map[string]string
	// errs are what is wrong with the form itself, by field: arguments that are not JSON, a
	// reason with a NUL, a remembered approval's life that is not a number.
	errs map[string]string
}

// cardOf reads the request's card form. A form that names neither a decision nor an action is
// bad_request.
func cardOf(c echo.Context) (card, error) {
	form, err := c.FormParams()
	if err != nil {
		return card{}, fault.New(fault.KindBadRequest, "the form could not be read", nil)
	}
	// A question's answers are the prefixed fields, by property name; everything else is the
	// card's own (decision, args, reason, action), so no property name can pose as one of those.
	k := card{values: map[string]string{}, answers: map[string]string{}}
	for name, vs := range form {
		if len(vs) == 0 || name == views.CSRFField {
			continue
		}
		if prop, ok := strings.CutPrefix(name, views.AnswerFieldPrefix); ok {
			k.answers[prop] = vs[0]
		} else {
			k.values[name] = vs[0]
		}
	}
	// "Approve and remember" is an approve that asks for a grant (agent.Remember).
	remember, rememberErr := rememberFromForm(k.values)
	switch d, decided := k.values["decision"]; {
	case rememberErr != "":
		k.errs = map[string]string{views.RememberForField: rememberErr}
	case decided:
		k.res = agent.Resolution{Decision: d, Reason: strings.TrimSpace(k.values["reason"]), Remember: remember}
		if !agent.Storable(k.res.Reason) {
			k.errs = map[string]string{"reason": "A reason cannot hold a NUL character."}
			break
		}
		if d != "approve" {
			break
		}
		if k.values[views.ArgsFormField] != "" {
			// The arguments edited as fields (views.ArgFieldPrefix + a property name): the agent
			// types them by the tool's schema over the call's own arguments.
			k.res.ArgFields = map[string]string{}
			for name, v := range k.values {
				if prop, ok := strings.CutPrefix(name, views.ArgFieldPrefix); ok {
					k.res.ArgFields[prop] = v
				}
			}
		} else if edited, ok := k.values["args"]; ok {
			// The arguments field is sent as shown; the agent approves them as they were when
			// they mean the same JSON (it compares canonical hashes), else as an edit.
			if !json.Valid([]byte(edited)) {
				k.errs = map[string]string{"args": "The arguments are not valid JSON."}
				break
			}
			var compact bytes.Buffer
			_ = json.Compact(&compact, []byte(edited))
			k.res.Args = compact.Bytes()
		}
	default:
		action, ok := k.values["action"]
		if !ok {
			return card{}, fault.New(fault.KindBadRequest, "the form names neither a decision nor an action", nil)
		}
		k.res = agent.Resolution{Action: action}
		if action == "accept" {
			k.res.Answers = k.answers // the question's form types them
		}
	}
	return k, nil
}

// state is what the card shows again with errs: a question's answers by property name, else
// the card's own fields.
func (k card) state(convID, callID string, kind tools.PendingKind, errs map[string]string) *views.FormState {
	shown := k.values
	if kind == tools.PendingElicitation {
		shown = k.answers
	}
	return &views.FormState{ConversationID: convID, ToolCallID: callID, Values: shown, Errors: errs}
}

// cardErrors puts the agent's refusal of got's resolution beside the card's fields: the
// problems of typed fields (got.Fields) beside those fields, a refused remembered approval
// beside its choice, and every problem of arguments sent as JSON beside the arguments.
func cardErrors(te *fault.Error, got agent.Resolved) map[string]string {
	switch {
	case rememberProblem(te):
		return map[string]string{views.RememberForField: sentenceOf(te.Message)}
	case got.Fields != nil && got.Call.PendingKind == tools.PendingApproval:
		out := make(map[string]string, len(got.Fields))
		for name, msg := range got.Fields {
			if name != "" {
				name = views.ArgFieldPrefix + name
			}
			out[name] = msg
		}
		return out
	case got.Fields != nil:
		return got.Fields
	case len(te.Problems) == 0:
		return map[string]string{"args": te.Message}
	}
	msgs := make([]string, 0, len(te.Problems))
	for _, p := range te.Problems {
		path := p.Path
		if path == "" {
			path = "/"
		}
		msgs = append(msgs, path+": "+p.Message)
	}
	return map[string]string{"args": strings.Join(msgs, "; ")}
}
