// Package jsonform is a flat JSON Schema object (the elicitation subset) as a form: its fields,
// read in the order the schema's author wrote them, and the text a form sends back typed into
// JSON by them, with the problems per field. The agent types a card's answers and edited
// arguments with it; the views draw the same fields.
package jsonform

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"parley/internal/fault"
)

// Field is one input of a question form, read from a property of its JSON Schema.
type Field struct {
	Name        string
	Label       string // the title, else the property name
	Description string
	Type        string // string, number, integer, boolean
	Format      string // email, uri, date, date-time
	Enum        []string
	EnumNames   []string
	Required    bool
	Default     any
	Min, Max    *float64
	MinLength   *int
	MaxLength   *int
}

// InputType is the HTML input type of the field.
func (f Field) InputType() string {
	switch f.Type {
	case "number", "integer":
		return "number"
	case "boolean":
		return "checkbox"
	}
	switch f.Format {
	case "email":
		return "email"
	case "uri":
		return "url"
	case "date":
		return "date"
	case "date-time":
		return "datetime-local"
	}
	return "text"
}

// Step is the number input's step.
func (f Field) Step() string {
	if f.Type == "integer" {
		return "1"
	}
	return "any"
}

// OptionLabel is the label shown for the i-th enum value.
func (f Field) OptionLabel(i int) string {
	if i < len(f.EnumNames) && f.EnumNames[i] != "" {
		return f.EnumNames[i]
	}
	return f.Enum[i]
}

// DefaultText is the default as the input's initial value.
func (f Field) DefaultText() string {
	switch d := f.Default.(type) {
	case nil:
		return ""
	case string:
		if f.Format == "date-time" {
			if t, err := time.Parse(time.RFC3339, d); err == nil {
				return t.UTC().Format("2006-01-02T15:04")
			}
		}
		return d
	case float64:
		return strconv.FormatFloat(d, 'f', -1, 64)
	case bool:
		if d {
			return "on"
		}
		return ""
	}
	return fmt.Sprint(f.Default)
}

// Schema is a parsed form.
type Schema struct {
	Title       string
	Description string
	Fields      []Field
}

// Parse reads the fields of a flat object schema (the elicitation subset), in the
// order the properties appear in the schema.
func Parse(raw json.RawMessage) (Schema, error) {
	var s struct {
		Title       string                     `json:"title"`
		Description string                     `json:"description"`
		Properties  map[string]json.RawMessage `json:"properties"`
		Required    []string                   `json:"required"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return Schema{}, fmt.Errorf("parse form schema: %w", err)
	}
	order, err := PropertyOrder(raw)
	if err != nil {
		return Schema{}, err
	}
	req := map[string]bool{}
	for _, r := range s.Required {
		req[r] = true
	}
	out := Schema{Title: s.Title, Description: s.Description}
	for _, name := range order {
		var p struct {
			Type        string   `json:"type"`
			Title       string   `json:"title"`
			Description string   `json:"description"`
			Format      string   `json:"format"`
			Enum        []string `json:"enum"`
			EnumNames   []string `json:"enumNames"`
			Default     any      `json:"default"`
			Minimum     *float64 `json:"minimum"`
			Maximum     *float64 `json:"maximum"`
			MinLength   *int     `json:"minLength"`
			MaxLength   *int     `json:"maxLength"`
		}
		if err := json.Unmarshal(s.Properties[name], &p); err != nil {
			return Schema{}, fmt.Errorf("parse form property %q: %w", name, err)
		}
		label := p.Title
		if label == "" {
			label = name
		}
		out.Fields = append(out.Fields, Field{Name: name, Label: label, Description: p.Description, Type: p.Type,
			Format: p.Format, Enum: p.Enum, EnumNames: p.EnumNames, Required: req[name], Default: p.Default,
			Min: p.Minimum, Max: p.Maximum, MinLength: p.MinLength, MaxLength: p.MaxLength})
	}
	return out, nil
}

// PropertyOrder returns the keys of the schema's "properties" in document order, so the form
// asks its questions in the order the schema's author wrote them.
func PropertyOrder(raw json.RawMessage) ([]string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("parse form schema: %w", err)
	}
	props, ok := top["properties"]
	if !ok {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(props)))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("parse form properties: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("form properties must be an object")
	}
	var names []string
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("parse form properties: %w", err)
		}
		name, _ := tok.(string)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, fmt.Errorf("parse form property %q: %w", name, err)
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names, nil
}

// Content turns submitted form values into the answer's JSON object, typed by the schema.
// Empty optional fields are left out; an empty required field is left out too, so the schema's
// "required" reports it. Values that cannot be converted (a word in a number field) are
// reported per field.
func (fs Schema) Content(values map[string]string) (map[string]any, map[string]string) {
	content := map[string]any{}
	errs := map[string]string{}
	for _, f := range fs.Fields {
		v := strings.TrimSpace(values[f.Name])
		if f.Type == "boolean" {
			content[f.Name] = v == "on" || v == "true" || v == "1"
			continue
		}
		if v == "" {
			continue
		}
		switch f.Type {
		case "integer":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				errs[f.Name] = "Enter a whole number."
				continue
			}
			content[f.Name] = n
		case "number":
			n, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsInf(n, 0) || math.IsNaN(n) {
				errs[f.Name] = "Enter a number."
				continue
			}
			content[f.Name] = n
		default:
			if f.Format == "date-time" {
				// datetime-local gives "2006-01-02T15:04" without a zone; the form reads it as UTC.
				for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05"} {
					if t, err := time.Parse(layout, v); err == nil {
						v = t.UTC().Format(time.RFC3339)
						break
					}
				}
			}
			content[f.Name] = v
		}
	}
	return content, errs
}

// FieldErrors maps a validation error's problems (a JSON pointer and a message each) onto form
// fields. A problem at the root ("missing properties: 'email'") goes to each field it names, or
// to the form as a whole ("") when it names none.
func (fs Schema) FieldErrors(problems []fault.Problem) map[string]string {
	errs := map[string]string{}
	add := func(k, msg string) {
		if errs[k] == "" {
			errs[k] = msg
		} else if !strings.Contains(errs[k], msg) {
			errs[k] += "; " + msg
		}
	}
	names := make([]string, 0, len(fs.Fields))
	for _, f := range fs.Fields {
		names = append(names, f.Name)
	}
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, p := range problems {
		path, msg := p.Path, p.Message
		field := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 2)[0]
		field = strings.ReplaceAll(strings.ReplaceAll(field, "~1", "/"), "~0", "~")
		if field != "" {
			add(field, msg)
			continue
		}
		matched := false
		if strings.HasPrefix(msg, "missing propert") {
			for _, n := range names {
				if strings.Contains(msg, "'"+n+"'") {
					add(n, "This field is required.")
					matched = true
				}
			}
		}
		if !matched {
			add("", msg)
		}
	}
	return errs
}

// OrderLike puts the fields in the order the call's own arguments list them, when the arguments
// carry the form ({"schema": {"properties": …}}, as ask_user's do). The prompt's schema may have
// been re-encoded from a map on its way (sorted keys); the arguments are the model's own text,
// in the order it asked its questions. Fields the arguments do not name keep their place after.
func (fs Schema) OrderLike(args json.RawMessage) Schema {
	var a map[string]json.RawMessage
	if json.Unmarshal(args, &a) != nil || len(a["schema"]) == 0 {
		return fs
	}
	order, err := PropertyOrder(a["schema"])
	if err != nil || len(order) == 0 {
		return fs
	}
	rank := make(map[string]int, len(order))
	for i, n := range order {
		rank[n] = i
	}
	out := fs
	out.Fields = append([]Field(nil), fs.Fields...)
	sort.SliceStable(out.Fields, func(i, j int) bool {
		ri, oki := rank[out.Fields[i].Name]
		rj, okj := rank[out.Fields[j].Name]
		switch {
		case oki && okj:
			return ri < rj
		case oki != okj:
			return oki
		}
		return false
	})
	return out
}

// Shows reports whether the form has a field for every property of args (a JSON object): only
// then can a card built from the fields show everything that would run. A schema that allows
// properties it does not name (JSON Schema's default) lets a model add one no field shows
// ({"to": …, "cc": "thief@…"}); such arguments are shown, and edited, as JSON instead. Arguments
// that are not an object are not shown by fields either.
func (fs Schema) Shows(args json.RawMessage) bool {
	var a map[string]json.RawMessage
	if json.Unmarshal(args, &a) != nil || a == nil {
		return false
	}
	named := make(map[string]bool, len(fs.Fields))
	for _, f := range fs.Fields {
		named[f.Name] = true
	}
	for k := range a {
		if !named[k] {
			return false
		}
	}
	return true
}

// Args builds a call's edited arguments from a form of its arguments (values, by property name)
// and the arguments the call had: every field of the form replaces its property (an empty one
// removes it, a checkbox that was absent and stays unchecked stays absent), typed by the schema;
// properties the form does not show stay as they were. errs are per field (by property name)
// for values that cannot be typed; the tool's schema judges the rest.
func (fs Schema) Args(original json.RawMessage, values map[string]string) (json.RawMessage, map[string]string, error) {
	args := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(original)) > 0 {
		if err := json.Unmarshal(original, &args); err != nil {
			return nil, nil, fmt.Errorf("read the call's arguments: %w", err)
		}
	}
	errs := map[string]string{}
	for _, f := range fs.Fields {
		v, sent := values[f.Name]
		_, had := args[f.Name]
		switch {
		case f.Type == "boolean":
			on := sent && (v == "on" || v == "true" || v == "1")
			if on || had {
				args[f.Name] = json.RawMessage(strconv.FormatBool(on))
			}
			continue
		case f.Type != "string" && strings.TrimSpace(v) == "", f.Type == "string" && v == "":
			delete(args, f.Name)
			continue
		}
		switch f.Type {
		case "integer":
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				errs[f.Name] = "Enter a whole number."
				continue
			}
			args[f.Name] = json.RawMessage(strconv.FormatInt(n, 10))
		case "number":
			t := strings.TrimSpace(v)
			var n json.Number
			if json.Unmarshal([]byte(t), &n) != nil || !json.Valid([]byte(t)) {
				errs[f.Name] = "Enter a number."
				continue
			}
			args[f.Name] = json.RawMessage(t)
		default:
			b, _ := json.Marshal(strings.ReplaceAll(v, "\r\n", "\n"))
			args[f.Name] = b
		}
	}
	if len(errs) > 0 {
		return nil, errs, nil
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the arguments: %w", err)
	}
	return b, nil, nil
}
