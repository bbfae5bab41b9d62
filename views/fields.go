package views

import (
	"encoding/json"

	"parley/internal/jsonform"
)

// Field is one input of a form built from a JSON Schema (a question's, or an approval card's
// arguments): package jsonform reads it, and types what the form sends back.
type Field = jsonform.Field

// FormSchema is a parsed form.
type FormSchema = jsonform.Schema

// ParseFormSchema reads the fields of a flat object schema (the elicitation subset), in the
// order the properties appear in the schema.
func ParseFormSchema(raw json.RawMessage) (FormSchema, error) { return jsonform.Parse(raw) }
