package web

import (
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/views"
)

// This file is the approval card's arguments edited as fields built from the tool's schema
// (jsonform.Schema.Args), for the page's resolve (pages.go: resolvePage).

// argsFromFields reads the approval card's argument fields (views.ArgFieldPrefix + a property
// name) into values["args"], the JSON of the edited arguments, typed by the call's schema. It
// takes a view of the call (its schema and its arguments). errs are values that cannot be typed
// (a word in a number field), by field.
func (s *Server) argsFromFields(c echo.Context, convID, callID string, values map[string]string) (*agent.CallView, *views.FormSchema, map[string]string, error) {
	v, err := s.agent.View(c.Request().Context(), convID, principal(c))
	if err != nil {
		return nil, nil, nil, err
	}
	call := findCall(v, callID)
	if call == nil {
		return nil, nil, nil, fault.New(fault.KindNotFound, "no such tool call", nil)
	}
	fs, err := views.ParseFormSchema(call.Schema)
	if err != nil || len(call.Schema) == 0 {
		return nil, nil, nil, fault.New(fault.KindBadRequest, "this call's arguments cannot be edited as fields: send them as JSON", nil)
	}
	fields := map[string]string{}
	for k, val := range values {
		if name, ok := strings.CutPrefix(k, views.ArgFieldPrefix); ok {
			fields[name] = val
		}
	}
	args, errs, err := fs.Args(call.Args, fields)
	if err != nil {
		return nil, nil, nil, fault.New(fault.KindBadRequest, "the arguments' fields could not be read", nil)
	}
	if len(errs) > 0 {
		byField := make(map[string]string, len(errs))
		for name, msg := range errs {
			byField[views.ArgFieldPrefix+name] = msg
		}
		return call, &fs, byField, nil
	}
	values["args"] = string(args)
	return call, &fs, nil, nil
}

// argFieldErrors puts the schema's problems with edited arguments beside their fields.
func argFieldErrors(fs *views.FormSchema, te *fault.Error) map[string]string {
	out := map[string]string{}
	for k, msg := range fs.FieldErrors(te.Problems) {
		if k == "" {
			out[""] = msg
			continue
		}
		out[views.ArgFieldPrefix+k] = msg
	}
	if len(out) == 0 {
		out[""] = te.Message
	}
	return out
}
