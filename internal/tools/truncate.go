package tools

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
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
	keep := max - reserve
	if keep < 0 {
		keep = 0
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	out := s[:keep] + fmt.Sprintf(TruncationMarker, keep, len(s))
	if len(out) > max {
		// max is smaller than the marker itself: keep what fits of the marker, rune-safe.
		cut := max
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		return out[:cut]
	}
	return out
}

// BoundEnvelope keeps a result envelope within max bytes (0: the default). An envelope that is
// too large is replaced by one that is still valid JSON: the original envelope as a truncated
// string under "result" with "truncated": true, so the model sees the start and knows it was cut.
func BoundEnvelope(b json.RawMessage, max int) json.RawMessage {
	if max <= 0 {
		max = DefaultMaxOutputBytes
	}
	if len(b) <= max {
		return b
	}
	var env struct {
		OK bool `json:"ok"`
	}
	_ = json.Unmarshal(b, &env)
	// JSON escaping can grow a string up to 6x; shrink until it fits.
	budget := max - 64
	for budget > 0 {
		var out []byte
		var err error
		text := Truncate(string(b), budget)
		if env.OK {
			out, err = json.Marshal(map[string]any{"ok": true, "truncated": true, "result": text})
		} else {
			out, err = json.Marshal(map[string]any{"ok": false, "truncated": true, "error": map[string]any{"kind": "internal", "message": text, "details": map[string]any{}}})
		}
		if err == nil && len(out) <= max {
			return out
		}
		budget = budget * 3 / 4
	}
	out, _ := json.Marshal(map[string]any{"ok": env.OK, "truncated": true})
	return out
}
