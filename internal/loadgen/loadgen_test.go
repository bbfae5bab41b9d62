package loadgen

import (
	"encoding/json"
	"testing"
	"time"

	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

func TestAnswerSatisfiesFormSchemas(t *testing.T) {
	schemas := []string{
		`{"type":"object","properties":{"name":{"type":"string","minLength":1}},"required":["name"]}`,
		`{"type":"object","properties":{"email":{"type":"string","format":"email"},"day":{"type":"string","format":"date"},
		  "at":{"type":"string","format":"date-time"},"site":{"type":"string","format":"uri"},
		  "colour":{"type":"string","enum":["red","blue"]},"ok":{"type":"boolean"},
		  "n":{"type":"integer","minimum":3},"x":{"type":"number"}},"required":["email","day","colour","ok","n"]}`,
	}
	for i, s := range schemas {
		c := jsonschema.NewCompiler()
		c.AssertFormat = true
		if err := c.AddResource("mem://s.json", strings.NewReader(s)); err != nil {
			t.Fatal(err)
		}
		sch, err := c.Compile("mem://s.json")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(Answer(json.RawMessage(s)))
		var v any
		_ = json.Unmarshal(b, &v)
		if err := sch.Validate(v); err != nil {
			t.Errorf("schema %d: answer %s does not validate: %v", i, b, err)
		}
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if got := Pct(ds, 50); got != 50*time.Millisecond {
		t.Errorf("p50 = %s", got)
	}
	if got := Pct(ds, 99); got != 99*time.Millisecond {
		t.Errorf("p99 = %s", got)
	}
	if got := Pct(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %s", got)
	}
}
