package agent

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestWireResolutionKeepsItsNames: a resolve forwarded to the conversation's owner crosses in
// the names the processes always used (those of the API's resolve body), whatever the Go
// fields are called, and comes back the same.
func TestWireResolutionKeepsItsNames(t *testing.T) {
	r := Resolution{Decision: "approve", Args: json.RawMessage(`{"a":1}`), Reason: "ok", Remember: &Remember{Scope: "user", ForSecs: 60}}
	b, err := json.Marshal(toWireResolution(r))
	if err != nil || string(b) != `{"decision":"approve","args":{"a":1},"reason":"ok","remember":{"scope":"user","for_secs":60},"arg_fields":null,"answers":null}` {
		t.Fatalf("wire %s %v", b, err)
	}
	var w wireResolution
	if err := json.Unmarshal(b, &w); err != nil || !reflect.DeepEqual(w.resolution(), r) {
		t.Fatalf("back %+v %v, want %+v", w.resolution(), err, r)
	}
	c := Resolution{Result: json.RawMessage(`{}`), Error: &ClientError{Message: "no"}}
	b, _ = json.Marshal(toWireResolution(c))
	if string(b) != `{"result":{},"error":{"message":"no"},"arg_fields":null,"answers":null}` {
		t.Fatalf("wire %s", b)
	}
	// A form without fields, answered, is not an answer without its form.
	q := Resolution{Action: "accept", Answers: map[string]string{}}
	b, _ = json.Marshal(toWireResolution(q))
	if err := json.Unmarshal(b, &w); err != nil || w.resolution().Answers == nil {
		t.Fatalf("an empty form's answers crossed as %s", b)
	}
}
