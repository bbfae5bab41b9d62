package tools

import (
	"encoding/json"
	"fmt"
	"parley/internal/fault"
)

// TruncationMarker ends text cut by Truncate, so the model knows output was cut.
const TruncationMarker = "\n…[truncated: %d of %d bytes shown]"

// Truncate bounds s to at most max bytes (0: DefaultMaxOutputBytes), marker included, never
// cutting a UTF-8 character in two.
func Truncate(s string, max int) string {
	if max <= 0 {
		max = DefaultMaxOutputBytes
	}
	if len(s) <= max {
		return s
	}
	// The marker's length depends on the kept count; reserve for the widest form.
	reserve := len(fmt.Sprintf(TruncationMarker, len(s), len(s)))
	kept := CutRunes(s, max-reserve)
	out := kept + fmt.Sprintf(TruncationMarker, len(kept), len(s))
	// When max is smaller than the marker itself: keep what fits of the marker, rune-safe.
	return CutRunes(out, max)
}

// MinOutputBytes is the smallest output bound: below it not even a truncated envelope with its
// error kind fits. New refuses a smaller MaxOutputBytes, and BoundEnvelope raises a smaller max.
const MinOutputBytes = 256

func boundMax(max int) int {
	if max < MinOutputBytes {
		return MinOutputBytes
	}
	return max
}

// BoundEnvelope keeps a result envelope within max bytes (0: the default; less than
// MinOutputBytes counts as MinOutputBytes). An envelope that is
// too large is replaced by one that is still valid JSON and marked "truncated": true:
//   - a success keeps its result as text (a string result as itself, anything else as its JSON
//     encoding), cut by Truncate so the model sees the start and the marker;
//   - an error keeps its kind, so callers and the model can still branch on it, with the
//     message cut and the details replaced by their truncated JSON text.
//
// Input that is not an envelope is bounded as a success whose result is the input's text.
func BoundEnvelope(b json.RawMessage, max int) json.RawMessage {
	if max <= 0 {
		max = DefaultMaxOutputBytes
	}
	max = boundMax(max)
	if len(b) <= max {
		return b
	}
	var env struct {
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Kind    fault.Kind      `json:"kind"`
			Message string          `json:"message"`
			Details json.RawMessage `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &env); err != nil || (!env.OK && env.Error == nil) {
		env.OK, env.Result, env.Error = true, b, nil
	}
	var build func(budget int) any
	if env.OK {
		text := string(env.Result)
		var s string
		if json.Unmarshal(env.Result, &s) == nil {
			text = s
		}
		build = func(budget int) any {
			return struct {
				OK        bool   `json:"ok"`
				Truncated bool   `json:"truncated"`
				Result    string `json:"result"`
			}{true, true, Truncate(text, budget)}
		}
	} else {
		kind := env.Error.Kind
		if kind == "" {
			kind = fault.KindInternal
		}
		msg, details := env.Error.Message, string(env.Error.Details)
		build = func(budget int) any {
			// The message gets the budget first; details share what is left.
			m := Truncate(msg, budget)
			d := map[string]any{}
			if rest := budget - len(m); rest > 0 && details != "" && details != "{}" && details != "null" {
				d["text"] = Truncate(details, rest)
			}
			return struct {
				OK        bool           `json:"ok"`
				Truncated bool           `json:"truncated"`
				Error     map[string]any `json:"error"`
			}{false, true, map[string]any{"kind": kind, "message": m, "details": d}}
		}
	}
	// Escaping can grow the text (a control character becomes six bytes), so shrink the
	// budget by the overshoot until the encoding fits. Cutting k more input bytes removes at
	// least k output bytes, so this settles in a few rounds.
	for budget, round := max, 0; budget > 0 && round < 64; round++ {
		out, err := marshalText(build(budget))
		if err != nil {
			break
		}
		if len(out) <= max {
			return out
		}
		over := len(out) - max
		budget -= over
	}
	out, _ := marshalText(struct {
		OK        bool `json:"ok"`
		Truncated bool `json:"truncated"`
	}{env.OK, true})
	return out
}
