package tools

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// mapKeys are the keys FromMap reads. Anything else is refused: a misspelt "aproval" must
// not silently leave a side-effecting tool ungated.
var mapKeys = map[string]bool{
	"name": true, "description": true, "parameters": true, "executor": true, "approval": true,
	"approvers": true, "streaming": true, "retention": true, "timeout_secs": true,
	"max_attempts": true, "response_schema": true, "result_schema": true, "native": true,
	"native_format": true, "max_output_bytes": true,
}

var retentionKeys = map[string]bool{"max_age_turns": true, "max_count": true, "never_evict": true}

// FromMap builds a tool from a declaration decoded from JSON (a tools file entry, say) and the
// callback of a server tool. Keys: name, description, parameters, executor, approval,
// approvers, streaming, retention {max_age_turns, max_count, never_evict}, timeout_secs,
// max_attempts, response_schema, result_schema, native, native_format, max_output_bytes.
//
// An unknown key or a value of the wrong type is refused with a *DefinitionError naming the
// tool and the key; the declaration is then checked by New. Schemas given as
// json.RawMessage (or []byte) are kept byte for byte; schemas given as decoded maps are
// re-encoded.
func FromMap(m map[string]any, fn Func) (*Tool, error) {
	name, _ := m["name"].(string)
	bad := func(rule string, err error) (*Tool, error) {
		return nil, &DefinitionError{Tool: name, Rule: rule, Err: err}
	}
	if unknown := unknownKeys(m, mapKeys); len(unknown) > 0 {
		return bad("unknown key "+strings.Join(unknown, ", "), nil)
	}
	if v, ok := m["name"]; ok {
		if _, isStr := v.(string); !isStr {
			return bad(fmt.Sprintf(`"name" must be a string, not %s`, jsonType(v)), nil)
		}
	}
	s := Spec{Name: name, Func: fn}
	var err error
	str := func(key string) string {
		if err != nil {
			return ""
		}
		var v string
		v, err = stringAt(m, key)
		return v
	}
	s.Description = str("description")
	s.Executor = Executor(str("executor"))
	s.Approval = Approval(str("approval"))
	s.Approvers = Approvers(str("approvers"))
	s.NativeFormat = str("native_format")
	if err != nil {
		return bad(err.Error(), nil)
	}
	if s.Streaming, err = boolAt(m, "streaming"); err != nil {
		return bad(err.Error(), nil)
	}
	if s.MaxAttempts, err = intAt(m, "max_attempts"); err != nil {
		return bad(err.Error(), nil)
	}
	if s.MaxOutputBytes, err = intAt(m, "max_output_bytes"); err != nil {
		return bad(err.Error(), nil)
	}
	if v, ok := m["timeout_secs"]; ok {
		secs, isNum := number(v)
		if !isNum || secs < 0 || secs > math.MaxInt64/float64(time.Second) {
			return bad(fmt.Sprintf(`"timeout_secs" must be a non-negative number of seconds, not %s`, jsonType(v)), nil)
		}
		s.Timeout = time.Duration(secs * float64(time.Second))
	}
	for _, f := range []struct {
		key string
		dst *json.RawMessage
	}{{"parameters", &s.Parameters}, {"response_schema", &s.ResponseSchema}, {"result_schema", &s.ResultSchema}, {"native", &s.Native}} {
		if *f.dst, err = objectAt(m, f.key); err != nil {
			return bad(err.Error(), nil)
		}
	}
	if v, ok := m["retention"]; ok {
		r, isMap := v.(map[string]any)
		if !isMap {
			return bad(fmt.Sprintf(`"retention" must be an object, not %s`, jsonType(v)), nil)
		}
		if unknown := unknownKeys(r, retentionKeys); len(unknown) > 0 {
			return bad("unknown key retention."+strings.Join(unknown, ", retention."), nil)
		}
		if s.Retention.MaxAgeTurns, err = intAt(r, "max_age_turns"); err != nil {
			return bad("retention: "+err.Error(), nil)
		}
		if s.Retention.MaxCount, err = intAt(r, "max_count"); err != nil {
			return bad("retention: "+err.Error(), nil)
		}
		if s.Retention.NeverEvict, err = boolAt(r, "never_evict"); err != nil {
			return bad("retention: "+err.Error(), nil)
		}
	}
	return New(s)
}

// unknownKeys lists m's keys outside allowed, quoted and sorted.
func unknownKeys(m map[string]any, allowed map[string]bool) []string {
	var out []string
	for k := range m {
		if !allowed[k] {
			out = append(out, fmt.Sprintf("%q", k))
		}
	}
	sort.Strings(out)
	return out
}

func stringAt(m map[string]any, key string) (string, error) {
	v, ok := m[key]
	if !ok {
		return "", nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", fmt.Errorf("%q must be a string, not %s", key, jsonType(v))
	}
	return s, nil
}

func boolAt(m map[string]any, key string) (bool, error) {
	v, ok := m[key]
	if !ok {
		return false, nil
	}
	b, isBool := v.(bool)
	if !isBool {
		return false, fmt.Errorf("%q must be a boolean, not %s", key, jsonType(v))
	}
	return b, nil
}

func intAt(m map[string]any, key string) (int, error) {
	v, ok := m[key]
	if !ok {
		return 0, nil
	}
	f, isNum := number(v)
	if !isNum || f != math.Trunc(f) || math.Abs(f) > 1<<31 {
		return 0, fmt.Errorf("%q must be an integer, not %s", key, jsonType(v))
	}
	return int(f), nil
}

// objectAt reads a JSON object given as json.RawMessage, []byte or a decoded map.
func objectAt(m map[string]any, key string) (json.RawMessage, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return nil, nil
	}
	var raw json.RawMessage
	switch x := v.(type) {
	case json.RawMessage:
		raw = x
	case []byte:
		raw = x
	case map[string]any:
		b, err := json.Marshal(x)
		if err != nil {
			return nil, fmt.Errorf("%q cannot be encoded: %w", key, err)
		}
		raw = b
	default:
		return nil, fmt.Errorf("%q must be a JSON object, not %s", key, jsonType(v))
	}
	var probe any
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("%q is not valid JSON: %w", key, err)
	}
	if _, isObj := probe.(map[string]any); !isObj {
		return nil, fmt.Errorf("%q must be a JSON object, not %s", key, jsonType(probe))
	}
	return raw, nil
}

// number reads a JSON number as decoded by encoding/json (float64 or json.Number) or a Go int.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, !math.IsNaN(x) && !math.IsInf(x, 0)
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// jsonType names v's JSON type for error messages.
func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, int, int64, json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any, json.RawMessage:
		return "an object"
	default:
		return fmt.Sprintf("%T", x)
	}
}
