package agent

import (
	"bytes"
	"encoding/json"
	"regexp"
	"unicode/utf8"

	"parley/internal/store"
	"parley/internal/tools"
)

// This file makes what the model, tools and browsers produce storable before it reaches the
// store: PostgreSQL refuses a NUL byte or invalid UTF-8 in text, and a write refused for its
// content would be refused again on every retry. Text is cleaned (NUL and invalid bytes become
// U+FFFD) and bounded; ids the model gives that are unusable are replaced (turn.go).

// Bounds on text the model names things with.
const (
	maxIDBytes   = 128 // a tool_call_id the app keeps as the model gave it
	maxNameBytes = 256 // a tool name kept in the log (an unknown tool's included)
)

// safeID is the shape of a tool_call_id the app keeps as the model gave it: it is a path
// segment of the page's resolve URL and an element id, so nothing that routes, escapes or
// walks ("/", "?", "#", "%", "..", spaces, controls) and nothing long.
var safeID = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.:-]{0,127}$`)

// usableID reports whether a model's tool_call_id can be kept as the call's id.
func usableID(id string) bool { return len(id) <= maxIDBytes && safeID.MatchString(id) }

// storable returns s as text every store keeps (tools.StorableText).
func storable(s string) string { return tools.StorableText(s) }

// bounded is storable(s) cut to at most n bytes (tools.BoundedText).
func bounded(s string, n int) string { return tools.BoundedText(s, n) }

// storableJSON returns raw as JSON every store keeps: valid UTF-8, and no NUL character even
// escaped (PostgreSQL's text and jsonb refuse it). raw is returned as it is when it already is.
func storableJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || (utf8.Valid(raw) && !bytes.Contains(raw, []byte(`\u0000`)) && bytes.IndexByte(raw, 0) < 0) {
		return raw
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(bytes.ToValidUTF8(raw, []byte("\uFFFD"))))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		b, _ := json.Marshal(storable(string(raw)))
		return b
	}
	b, err := json.Marshal(cleanValue(v))
	if err != nil {
		b, _ = json.Marshal(storable(string(raw)))
	}
	return b
}

// cleanValue replaces NUL in every string and key of a decoded JSON value.
func cleanValue(v any) any {
	switch x := v.(type) {
	case string:
		return storable(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[storable(k)] = cleanValue(e)
		}
		return out
	case []any:
		for i := range x {
			x[i] = cleanValue(x[i])
		}
		return x
	}
	return v
}

// makeStorable cleans every text and JSON field of a batch in place. The actor cleans what it
// takes in where it takes it in (model answers, tool outcomes, browser reports); this is the
// last line before the store, so no content can make an append fail for ever.
func makeStorable(b *store.Batch) {
	for i := range b.Entries {
		e := &b.Entries[i]
		e.ToolCallID, e.Actor, e.Data = storable(e.ToolCallID), storable(e.Actor), storableJSON(e.Data)
	}
	for i := range b.Calls {
		c := &b.Calls[i]
		c.ToolCallID, c.Name = storable(c.ToolCallID), storable(c.Name)
		c.Args, c.Result, c.Prompt = storableJSON(c.Args), storableJSON(c.Result), storableJSON(c.Prompt)
	}
	for i := range b.Steps {
		b.Steps[i].Key, b.Steps[i].LastError = storable(b.Steps[i].Key), storable(b.Steps[i].LastError)
	}
	for i := range b.Audit {
		r := &b.Audit[i]
		r.ToolCallID, r.Tool, r.ActorID, r.Reason = storable(r.ToolCallID), storable(r.Tool), storable(r.ActorID), storable(r.Reason)
	}
	for i := range b.Schedule {
		b.Schedule[i].ToolCallID = storable(b.Schedule[i].ToolCallID)
	}
	for i := range b.Cancel {
		b.Cancel[i] = storable(b.Cancel[i])
	}
}
