package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
)

// TestResolveTypesACardsFields: a card's fields come as text; Resolve types them by the call's
// own schemas (a question's form, the tool's parameters over the call's arguments) and judges
// the result as it judges JSON. A refusal's problems come back keyed by field.
func TestResolveTypesACardsFields(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"q1", "ask_user", askArgs}, tc{"c1", "send_email", emailArgs}), say("Done."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("ask, then email")
		e.waitCall("q1", store.CallAwaiting)
		e.waitCall("c1", store.CallAwaiting)

		// A question's answers: refused by its form, beside the field; then taken, typed.
		got, err := e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "accept", Answers: map[string]string{"city": "L"}}, e.owner)
		if kindOf(err) != fault.KindInvalidArgs || got.Call.ID != "q1" || got.Fields["city"] == "" {
			t.Fatalf("a short city: %v, fields %v", err, got.Fields)
		}
		got, err = e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "accept", Answers: map[string]string{}}, e.owner)
		if kindOf(err) != fault.KindInvalidArgs || got.Fields["city"] != "This field is required." {
			t.Fatalf("no city: %v, fields %v", err, got.Fields)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "decline", Answers: map[string]string{"city": "Lyon"}}, e.owner); kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("answers with a decline: %v", err)
		}
		if got, err = e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "accept", Answers: map[string]string{"city": " Lyon "}}, e.owner); err != nil || got.Fields != nil {
			t.Fatalf("answer: %v, fields %v", err, got.Fields)
		}

		// Edited arguments as fields: a value the schema refuses is refused beside its field and
		// nothing is decided; fields left as they were approve the call as it is.
		got, err = e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve", ArgFields: map[string]string{"to": "not an email", "subject": "Hi", "body": "Lunch?"}}, e.owner)
		if kindOf(err) != fault.KindInvalidArgs || got.Fields["to"] == "" || len(got.Fields) != 1 {
			t.Fatalf("a bad address: %v, fields %v", err, got.Fields)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "deny", ArgFields: map[string]string{}}, e.owner); kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("fields with a deny: %v", err)
		}
		if got, err = e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve", ArgFields: map[string]string{"to": "bob@example.test", "subject": "Hi", "body": "Lunch?"}}, e.owner); err != nil {
			t.Fatalf("approve: %v (fields %v)", err, got.Fields)
		}
		if c := e.call("c1"); c.Decision != "approve" {
			t.Fatalf("untouched fields approved as %q, want a plain approve", c.Decision)
		}
		e.waitStatus(store.StatusIdle)
		if q := e.call("q1"); !strings.Contains(string(q.Result), `"content":{"city":"Lyon"}`) {
			t.Fatalf("the question's answer %s", q.Result)
		}
	})
}

// TestArgsFromFieldsTypesByTheSchema: a card's argument fields are typed by the tool's schema
// over the call's arguments; a word in a number field is a problem at its property; a call with
// a property no field shows (the card shows it as JSON) is not edited by fields.
func TestArgsFromFieldsTypesByTheSchema(t *testing.T) {
	c := CallView{Schema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"},"a/b":{"type":"integer"},"s":{"type":"string"}}}`),
		Args: json.RawMessage(`{"n":1,"s":"x"}`)}
	args, err := ArgsFromFields(c, map[string]string{"n": "2", "s": "y"})
	if err != nil || string(args) != `{"n":2,"s":"y"}` {
		t.Fatalf("typed %s %v", args, err)
	}
	hidden := CallView{Schema: c.Schema, Args: json.RawMessage(`{"n":1,"s":"x","keep":[1]}`)}
	if _, err := ArgsFromFields(hidden, map[string]string{"n": "2", "s": "y"}); kindOf(err) != fault.KindBadRequest {
		t.Fatalf("fields over a property they do not show: %v", err)
	}
	_, err = ArgsFromFields(c, map[string]string{"n": "two", "a/b": "x"})
	te, _ := err.(*fault.Error)
	if te == nil || te.Kind != fault.KindInvalidArgs || len(te.Problems) != 2 || te.Problems[0].Path != "/a~1b" || te.Problems[1].Path != "/n" ||
		!strings.HasPrefix(te.Message, "some arguments cannot be read: ") {
		t.Fatalf("untypeable fields: %v %+v", err, te)
	}
	if _, err := ArgsFromFields(CallView{}, map[string]string{"n": "2"}); kindOf(err) != fault.KindBadRequest {
		t.Fatalf("a call without a schema: %v", err)
	}
}
