package agent

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"parley/internal/fault"
	"parley/internal/jsonform"
)

// This file types a card's fields. A card sends text: a question's answers, or an approval's
// arguments edited as fields. The agent types them itself, from the schemas the call already
// holds (the question's form, the tool's parameters), into the JSON a resolution carries, and
// then judges that JSON as it judges the API's: one way of typing, whoever answers. A refused
// answer's problems go back keyed by field (Resolved.Fields).

// typeFields is r with its card's fields typed into its JSON: edited arguments (ArgFields) over
// c's arguments by the tool's schema into Args, a question's answers (Answers) by its form into
// Content. A field that cannot be typed (a word in a number field) is an invalid_args problem at
// its property.
func (c *call) typeFields(r Resolution) (Resolution, error) {
	switch {
	case r.ArgFields != nil:
		args, err := argsFromFields(c.schema(), c.effectiveArgs(), r.ArgFields)
		if err != nil {
			return r, err
		}
		r.Args, r.ArgFields = args, nil
	case r.Answers != nil:
		if c.prompt == nil {
			r.Answers = nil // no form to type them by: the answer is judged without content
			return r, nil
		}
		fs, err := jsonform.Parse(c.prompt.Schema)
		if err != nil {
			return r, fault.New(fault.KindInvalidArgs, "this question's form cannot be read", nil)
		}
		content, errs := fs.Content(r.Answers)
		if len(errs) > 0 {
			return r, fieldsInvalid("some answers cannot be read", errs)
		}
		r.Content, r.Answers = mustJSON(content), nil
	}
	return r, nil
}

// ArgsFromFields types an approval card's argument fields (text by property name) into the
// edited arguments of c: each field replaces its property of c's arguments, typed by the tool's
// schema. A call with a property the fields do not show (jsonform's Shows) is bad_request: its
// card offers the arguments as JSON. A field that cannot be typed is an
// invalid_args error with a problem at its property; a call whose arguments make no form is
// bad_request. Resolve types ArgFields with it; a plan preview of the card's fields too.
func ArgsFromFields(c CallView, fields map[string]string) (json.RawMessage, error) {
	return argsFromFields(c.Schema, c.Args, fields)
}

func argsFromFields(schema, args json.RawMessage, fields map[string]string) (json.RawMessage, error) {
	fs, err := jsonform.Parse(schema)
	if err != nil || len(schema) == 0 {
		return nil, fault.New(fault.KindBadRequest, "this call's arguments cannot be edited as fields: send them as JSON", nil)
	}
	if !fs.Shows(args) {
		// The card would have hidden an argument that runs: it offers JSON for such a call, so
		// fields for it come from something else than what it showed.
		return nil, fault.New(fault.KindBadRequest, "this call has arguments its fields do not show: send them as JSON", nil)
	}
	out, errs, err := fs.Args(args, fields)
	if err != nil {
		return nil, fault.New(fault.KindBadRequest, "the arguments' fields could not be read", nil)
	}
	if len(errs) > 0 {
		return nil, fieldsInvalid("some arguments cannot be read", errs)
	}
	return out, nil
}

// fieldsInvalid is the invalid_args error of fields that cannot be typed: one problem per
// field, at its property's path, the first named in the message.
func fieldsInvalid(what string, errs map[string]string) *fault.Error {
	names := make([]string, 0, len(errs))
	for name := range errs {
		names = append(names, name)
	}
	sort.Strings(names)
	problems := make([]fault.Problem, len(names))
	for i, name := range names {
		problems[i] = fault.Problem{Path: "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(name), Message: errs[name]}
	}
	return fault.Invalid(what+": "+errs[names[0]], problems...)
}

// fieldsOf puts the problems of a refused resolution that came as a card's fields beside those
// fields, by property name ("" for the answer as a whole); nil when r had no fields or err is
// not invalid_args.
func (c *call) fieldsOf(r Resolution, err error) map[string]string {
	var te *fault.Error
	if !errors.As(err, &te) || te.Kind != fault.KindInvalidArgs {
		return nil
	}
	var schema json.RawMessage
	switch {
	case r.ArgFields != nil:
		schema = c.schema()
	case r.Answers != nil:
		if c.prompt != nil {
			schema = c.prompt.Schema
		}
	default:
		return nil
	}
	fs, _ := jsonform.Parse(schema) // a form that cannot be read has no fields: problems go by path alone
	out := fs.FieldErrors(te.Problems)
	if len(out) == 0 {
		out[""] = te.Message
	}
	return out
}
