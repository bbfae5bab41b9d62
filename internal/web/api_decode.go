package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"parley/internal/fault"
	"reflect"
	"strings"
	"sync"
	"unicode"

	"github.com/labstack/echo/v4"
)

// decodeJSON reads the request body into v: one JSON object, no unknown fields, no key twice
// (in any object of the body, compared without case) and no key that is a field's name in
// another case (encoding/json would take "DECISION" for "decision"), within the body cap. Every failure is a 4xx tool error that names the problem; none is a 500. An empty body is
// accepted only when allowEmpty (v keeps its zero value).
func decodeJSON(c echo.Context, v any, allowEmpty bool) error {
	r := c.Request()
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return fault.Errorf(fault.KindUnsupportedMedia, "send the body as application/json, not %q", ct)
		}
	}
	body, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fault.Errorf(fault.KindTooLarge, "the body is larger than %d bytes", mbe.Limit)
	}
	if err != nil {
		return fault.Errorf(fault.KindBadRequest, "reading the body failed: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return fault.New(fault.KindBadRequest, "the body must be a JSON object", nil)
	}
	if err := checkKeys(body, jsonFieldNames(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fault.New(fault.KindBadRequest, "the body must hold exactly one JSON object", nil)
	}
	return nil
}

// decodeError words a json decoding failure for the caller.
func decodeError(err error) *fault.Error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fault.New(fault.KindBadRequest, fmt.Sprintf("malformed JSON at byte %d: %s", syn.Offset, syn.Error()),
			map[string]any{"offset": syn.Offset})
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return fault.New(fault.KindBadRequest, "the body must be a JSON object", nil)
		}
		return fault.New(fault.KindBadRequest, fmt.Sprintf("field %q must be %s, not %s", field, jsonType(typ.Type.Kind().String()), typ.Value),
			map[string]any{"field": field})
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fault.New(fault.KindBadRequest, "malformed JSON: the body ends too early", nil)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return fault.New(fault.KindBadRequest, fmt.Sprintf("unknown field %q", field), map[string]any{"field": field})
	}
	return fault.New(fault.KindBadRequest, "malformed JSON: "+err.Error(), nil)
}

// jsonType names a Go kind in JSON's words.
func jsonType(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "int", "int64", "int32", "float64", "float32", "uint", "uint64":
		return "a number"
	}
	return "a " + kind
}

// checkKeys refuses a body in which an object holds two keys equal but for case (a duplicate
// key included), or whose top-level object holds a key that is one of fields in another case:
// either would let one request say two things, and encoding/json would quietly keep one.
// Malformed JSON is left to the decoder, which words it better. Numbers are read as
// json.Number: as float64 one beyond its range (1e400, valid JSON that a RawMessage field takes
// as it is) would end the check there, and the keys after it would go unchecked.
func checkKeys(body []byte, fields map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		object bool
		keys   map[string]string // folded → as written
		key    bool              // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if top != nil && top.object {
					top.key = true // this value ends where the next key begins
				}
				stack = append(stack, &frame{object: t == '{', keys: map[string]string{}, key: t == '{'})
			default:
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].object {
					stack[len(stack)-1].key = true
				}
			}
			continue
		case string:
			if top != nil && top.object && top.key {
				folded := foldKey(t)
				if prev, dup := top.keys[folded]; dup {
					return fault.New(fault.KindBadRequest, fmt.Sprintf("the key %q appears twice (as %q and %q): send each key once", t, prev, t),
						map[string]any{"field": t})
				}
				top.keys[folded] = t
				if len(stack) == 1 && !fields[t] {
					for f := range fields {
						if strings.EqualFold(f, t) {
							return fault.New(fault.KindBadRequest, fmt.Sprintf("unknown field %q (did you mean %q? keys are case-sensitive)", t, f),
								map[string]any{"field": t})
						}
					}
				}
				top.key = false
				continue
			}
		}
		if top != nil && top.object {
			top.key = true
		}
	}
}

// jsonFieldNames are the JSON names of the fields of the struct v points to.
func jsonFieldNames(v any) map[string]bool {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return map[string]bool{}
	}
	if names, ok := fieldNames.Load(t); ok {
		return names.(map[string]bool)
	}
	out := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out[name] = true
	}
	names, _ := fieldNames.LoadOrStore(t, out)
	return names.(map[string]bool)
}

// fieldNames caches jsonFieldNames per struct type (the request types are few and fixed); the
// maps are read-only once stored.
var fieldNames sync.Map // reflect.Type → map[string]bool

// foldKey is key with every rune replaced by the smallest rune of its Unicode case-folding
// orbit: two keys fold alike exactly when encoding/json would match them to the same field
// (it compares names as strings.EqualFold does), so "meſſage" (long s) and "message" are one.
func foldKey(key string) string {
	var b strings.Builder
	b.Grow(len(key))
	for _, r := range key {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}
