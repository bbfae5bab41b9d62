package tools

import (
	"encoding/json"
	"fmt"
	"sort"
)

// ElicitationFormats are the string formats a question form may use (MCP elicitation).
var ElicitationFormats = map[string]bool{"email": true, "uri": true, "date": true, "date-time": true}

// CheckElicitationSchema checks that a form schema stays within the restricted subset of MCP
// elicitation: a flat object whose properties are string (optionally enum or one of the
// formats), number, integer or boolean, with titles, descriptions, defaults and simple bounds.
func CheckElicitationSchema(raw json.RawMessage) *Error {
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		return NewError(KindInvalidArgs, "the form schema is not a JSON object", nil)
	}
	var problems []map[string]any
	add := func(path, msg string) { problems = append(problems, map[string]any{"path": path, "message": msg}) }
	if s["type"] != "object" {
		add("/type", `a form schema must have "type": "object"`)
	}
	allowedTop := map[string]bool{"type": true, "properties": true, "required": true, "title": true, "description": true, "$schema": true}
	for k := range s {
		if !allowedTop[k] {
			add("/"+k, fmt.Sprintf("keyword %q is not allowed in a form schema", k))
		}
	}
	props, _ := s["properties"].(map[string]any)
	if len(props) == 0 {
		add("/properties", "a form needs at least one property")
	}
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	sort.Strings(names)
	allowedProp := map[string]bool{"type": true, "title": true, "description": true, "default": true, "enum": true, "enumNames": true,
		"format": true, "minLength": true, "maxLength": true, "minimum": true, "maximum": true}
	for _, n := range names {
		path := "/properties/" + n
		p, ok := props[n].(map[string]any)
		if !ok {
			add(path, "a property must be an object")
			continue
		}
		for k := range p {
			if !allowedProp[k] {
				add(path+"/"+k, fmt.Sprintf("keyword %q is not allowed in a form property", k))
			}
		}
		typ, _ := p["type"].(string)
		switch typ {
		case "string":
			if f, ok := p["format"]; ok {
				fs, _ := f.(string)
				if !ElicitationFormats[fs] {
					add(path+"/format", fmt.Sprintf("format %v is not one of email, uri, date, date-time", f))
				}
			}
			if e, ok := p["enum"]; ok {
				if arr, ok := e.([]any); !ok || len(arr) == 0 {
					add(path+"/enum", "enum must be a non-empty array of strings")
				} else {
					for _, v := range arr {
						if _, ok := v.(string); !ok {
							add(path+"/enum", "enum must be a non-empty array of strings")
							break
						}
					}
				}
			}
		case "number", "integer", "boolean":
			if _, ok := p["enum"]; ok {
				add(path+"/enum", "enum is only allowed on string properties")
			}
			if _, ok := p["format"]; ok {
				add(path+"/format", "format is only allowed on string properties")
			}
		default:
			add(path+"/type", fmt.Sprintf("type %v is not one of string, number, integer, boolean", p["type"]))
		}
	}
	if req, ok := s["required"]; ok {
		arr, ok := req.([]any)
		if !ok {
			add("/required", "required must be an array of property names")
		}
		for _, r := range arr {
			name, _ := r.(string)
			if _, ok := props[name]; !ok {
				add("/required", fmt.Sprintf("required names %v, which is not a property", r))
			}
		}
	}
	if len(problems) > 0 {
		return NewError(KindInvalidArgs, "the form schema is outside the supported subset", map[string]any{"problems": problems})
	}
	if _, err := CompileSchema("elicitation", raw); err != nil {
		return Errorf(KindInvalidArgs, "the form schema does not compile: %v", err)
	}
	return nil
}
