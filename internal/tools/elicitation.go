package tools

import (
	"encoding/json"
	"fmt"
	"math"
	"parley/internal/fault"
	"sort"
	"strings"
)

// ElicitationFormats are the string formats a question form may use (MCP elicitation).
var ElicitationFormats = map[string]bool{"email": true, "uri": true, "date": true, "date-time": true}

// propKeywords are the keywords each property type of the MCP elicitation subset may use,
// besides commonKeywords.
var propKeywords = map[string]map[string]bool{
	"string":  {"format": true, "minLength": true, "maxLength": true, "enum": true, "enumNames": true},
	"number":  {"minimum": true, "maximum": true},
	"integer": {"minimum": true, "maximum": true},
	"boolean": {},
}

var commonKeywords = map[string]bool{"type": true, "title": true, "description": true, "default": true}

// defaultFits reports whether a default value is of the property's type (and in its enum).
func defaultFits(typ string, d any, enum []any) bool {
	switch typ {
	case "string":
		s, ok := d.(string)
		if !ok {
			return false
		}
		if enum == nil {
			return true
		}
		for _, e := range enum {
			if e == s {
				return true
			}
		}
		return false
	case "number":
		_, ok := d.(float64)
		return ok
	case "integer":
		f, ok := d.(float64)
		return ok && f == math.Trunc(f)
	case "boolean":
		_, ok := d.(bool)
		return ok
	}
	return false
}

// escapePointer escapes a property name for a JSON pointer (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// CheckElicitationSchema checks that a form schema stays within the restricted subset of MCP
// elicitation: a flat object whose properties are string (optionally enum or one of the
// formats), number, integer or boolean, with titles, descriptions, defaults and simple bounds
// (minLength/maxLength on strings, minimum/maximum on numbers). Every problem is listed with
// its JSON path in details.problems.
func CheckElicitationSchema(raw json.RawMessage) *fault.Error {
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		return fault.New(fault.KindInvalidArgs, "the form schema is not a JSON object", nil)
	}
	var problems []fault.Problem
	add := func(path, msg string) { problems = append(problems, fault.Problem{Path: path, Message: msg}) }
	if s["type"] != "object" {
		add("/type", `a form schema must have "type": "object"`)
	}
	allowedTop := map[string]bool{"type": true, "properties": true, "required": true, "title": true, "description": true, "$schema": true}
	top := make([]string, 0, len(s))
	for k := range s {
		top = append(top, k)
	}
	sort.Strings(top)
	for _, k := range top {
		if !allowedTop[k] {
			add("/"+escapePointer(k), fmt.Sprintf("keyword %q is not allowed in a form schema", k))
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
	for _, n := range names {
		path := "/properties/" + escapePointer(n)
		p, ok := props[n].(map[string]any)
		if !ok {
			add(path, "a property must be an object")
			continue
		}
		typ, _ := p["type"].(string)
		allowed, known := propKeywords[typ]
		if !known {
			add(path+"/type", fmt.Sprintf("type %v is not one of string, number, integer, boolean", p["type"]))
			continue
		}
		keys := make([]string, 0, len(p))
		for k := range p {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !allowed[k] && !commonKeywords[k] {
				add(path+"/"+k, fmt.Sprintf("keyword %q is not allowed in a %s form property", k, typ))
			}
		}
		if f, ok := p["format"]; ok && typ == "string" {
			fs, _ := f.(string)
			if !ElicitationFormats[fs] {
				add(path+"/format", fmt.Sprintf("format %v is not one of email, uri, date, date-time", f))
			}
		}
		var enum []any
		if e, ok := p["enum"]; ok && typ == "string" {
			arr, ok := e.([]any)
			if !ok || len(arr) == 0 {
				add(path+"/enum", "enum must be a non-empty array of strings")
			} else {
				for _, v := range arr {
					if _, ok := v.(string); !ok {
						add(path+"/enum", "enum must be a non-empty array of strings")
						break
					}
				}
				enum = arr
			}
			if names, ok := p["enumNames"]; ok {
				if arr, ok := names.([]any); !ok || len(arr) != len(enum) {
					add(path+"/enumNames", "enumNames must be an array as long as enum")
				}
			}
		}
		if d, ok := p["default"]; ok && !defaultFits(typ, d, enum) {
			add(path+"/default", fmt.Sprintf("default %v is not a valid %s value", d, typ))
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
		return fault.Invalid("the form schema is outside the supported subset", problems...)
	}
	if _, err := CompileSchema("elicitation", raw); err != nil {
		return fault.Errorf(fault.KindInvalidArgs, "the form schema does not compile: %v", err)
	}
	return nil
}
