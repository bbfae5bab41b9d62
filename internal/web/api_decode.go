package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/tools"
)

// decodeJSON reads the request body into v: one JSON object, no unknown fields, within the body
// cap. Every failure is a 4xx tool error that names the problem; none is a 500. An empty body is
// accepted only when allowEmpty (v keeps its zero value).
func decodeJSON(c echo.Context, v any, allowEmpty bool) error {
	r := c.Request()
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return tools.Errorf(tools.KindUnsupportedMedia, "send the body as application/json, not %q", ct)
		}
	}
	body, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tools.Errorf(tools.KindTooLarge, "the body is larger than %d bytes", mbe.Limit)
	}
	if err != nil {
		return tools.Errorf(tools.KindBadRequest, "reading the body failed: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return tools.NewError(tools.KindBadRequest, "the body must be a JSON object", nil)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return tools.NewError(tools.KindBadRequest, "the body must hold exactly one JSON object", nil)
	}
	return nil
}

// decodeError words a json decoding failure for the caller.
func decodeError(err error) *tools.Error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return tools.NewError(tools.KindBadRequest, fmt.Sprintf("malformed JSON at byte %d: %s", syn.Offset, syn.Error()),
			map[string]any{"offset": syn.Offset})
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return tools.NewError(tools.KindBadRequest, "the body must be a JSON object", nil)
		}
		return tools.NewError(tools.KindBadRequest, fmt.Sprintf("field %q must be %s, not %s", field, jsonType(typ.Type.Kind().String()), typ.Value),
			map[string]any{"field": field})
	case errors.Is(err, io.ErrUnexpectedEOF):
		return tools.NewError(tools.KindBadRequest, "malformed JSON: the body ends too early", nil)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return tools.NewError(tools.KindBadRequest, fmt.Sprintf("unknown field %q", field), map[string]any{"field": field})
	}
	return tools.NewError(tools.KindBadRequest, "malformed JSON: "+err.Error(), nil)
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
