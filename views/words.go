package views

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"unicode/utf8"

	"parley/internal/agent"
	"parley/internal/jsonform"
	"parley/internal/tools"
)

// This file turns JSON into words for the cards: a tool's result as rows of names and values
// (or its text), a plan's details in the order of the tool's schema, and the approval card's
// argument fields built from that schema. Every value is bounded here and escaped by templ.

// ArgFieldPrefix names the approval card's argument fields ("arg." + a property name), apart
// from the card's own fields (decision, reason, args, return), as AnswerFieldPrefix does for a
// question's.
const ArgFieldPrefix = "arg."

// ArgsFormField is the hidden field that says the arguments came as fields, not as JSON.
const ArgsFormField = "args_form"

// Bounds of what a card shows of a value.
const (
	maxRows      = 24
	maxValueText = 400
	maxPlainText = 4000
)

// resultWords is a result as a card shows it: rows of names and values for an object of simple
// values, text for a string or a number, nothing (ok false) for shapes that read better as JSON.
type resultWords struct {
	Rows []kv
	Text string
	More int // rows left out past maxRows
}

// wordsFor reads a tool's result (the envelope's "result").
func wordsFor(raw json.RawMessage) (resultWords, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return resultWords{}, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return resultWords{}, false
	}
	switch x := v.(type) {
	case string:
		return resultWords{Text: clip(x, maxPlainText)}, x != ""
	case json.Number, bool:
		return resultWords{Text: scalarText(x)}, true
	case map[string]any:
		keys := objectKeys(raw)
		if len(keys) == 0 {
			return resultWords{}, false
		}
		var w resultWords
		for _, k := range keys {
			text, ok := inlineText(x[k])
			if !ok {
				return resultWords{}, false // nested structure: the JSON says it better
			}
			if len(w.Rows) == maxRows {
				w.More++
				continue
			}
			w.Rows = append(w.Rows, kv{humanKey(k), text})
		}
		return w, true
	}
	return resultWords{}, false
}

// inlineText is a value that fits on one row: a scalar, or a short list of scalars.
func inlineText(v any) (string, bool) {
	switch x := v.(type) {
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			switch e.(type) {
			case []any, map[string]any:
				return "", false
			}
			parts = append(parts, scalarText(e))
		}
		return clip(strings.Join(parts, ", "), maxValueText), true
	case map[string]any:
		return "", false
	}
	return clip(scalarText(v), maxValueText), true
}

func scalarText(v any) string {
	switch x := v.(type) {
	case nil:
		return "—"
	case string:
		return x
	case bool:
		if x {
			return "yes"
		}
		return "no"
	case json.Number:
		return x.String()
	}
	return fmt.Sprint(v)
}

// clip bounds s to n characters, with "…" when cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// humanKey turns a JSON key into a label: "time_zone" → "Time zone".
func humanKey(k string) string {
	s := strings.TrimSpace(strings.NewReplacer("_", " ", "-", " ").Replace(k))
	if s == "" {
		return k
	}
	r, size := utf8.DecodeRuneInString(s)
	return strings.ToUpper(string(r)) + s[size:]
}

// objectKeys returns the keys of a JSON object in document order (the first of duplicates).
func objectKeys(raw json.RawMessage) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		k, _ := tok.(string)
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return nil
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// planRows lists a plan's details in the order of the tool's schema properties, then the rest
// by name; "arguments" is left out (the card shows them).
func planRows(p *tools.Plan, schema json.RawMessage) []kv {
	if p == nil {
		return nil
	}
	rank := map[string]int{}
	if order, err := jsonform.PropertyOrder(schema); err == nil {
		for i, n := range order {
			rank[n] = i
		}
	}
	keys := make([]string, 0, len(p.Details))
	for k := range p.Details {
		if k != "arguments" {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		ri, oki := rank[keys[i]]
		rj, okj := rank[keys[j]]
		switch {
		case oki && okj:
			return ri < rj
		case oki != okj:
			return oki
		}
		return keys[i] < keys[j]
	})
	out := make([]kv, len(keys))
	for i, k := range keys {
		out[i] = kv{humanKey(k), valueText(p.Details[k])}
	}
	return out
}

// argsForm is the approval card's argument fields, when the tool's schema is a flat object of
// strings, numbers, integers and booleans (what a form shows well) and the call has no argument
// the fields would not show (jsonform's Shows); ok false otherwise (the card then offers the
// arguments as JSON, all of them).
func argsForm(c agent.CallView) (FormSchema, bool) {
	if len(c.Schema) == 0 {
		return FormSchema{}, false
	}
	fs, err := ParseFormSchema(c.Schema)
	if err != nil || len(fs.Fields) == 0 {
		return FormSchema{}, false
	}
	for _, f := range fs.Fields {
		switch f.Type {
		case "string", "number", "integer", "boolean":
		default:
			return FormSchema{}, false
		}
	}
	if !fs.Shows(c.Args) {
		return FormSchema{}, false // a property no field would show: the whole JSON instead
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(c.Args, &args) != nil {
		return FormSchema{}, false
	}
	for _, f := range fs.Fields {
		v, ok := args[f.Name]
		if !ok {
			continue
		}
		var x any
		if json.Unmarshal(v, &x) != nil {
			return FormSchema{}, false
		}
		switch x.(type) {
		case map[string]any, []any:
			return FormSchema{}, false // a value the field could not show as it is
		}
	}
	return fs, true
}

// argText is a field's value as the call's arguments hold it.
func argText(c agent.CallView, f Field) string {
	var args map[string]json.RawMessage
	if json.Unmarshal(c.Args, &args) != nil {
		return ""
	}
	raw, ok := args[f.Name]
	if !ok {
		return ""
	}
	var x any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&x) != nil {
		return ""
	}
	switch v := x.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		if v {
			return "on"
		}
	}
	return ""
}

// argValue is what an argument field shows: what was submitted, else the call's argument.
func argValue(c agent.CallView, fl Field, f *FormState) string {
	if v, ok := f.Value(ArgFieldPrefix + fl.Name); ok {
		return v
	}
	return argText(c, fl)
}

// argChecked is an argument checkbox's state.
func argChecked(c agent.CallView, fl Field, f *FormState) bool {
	v := argValue(c, fl, f)
	if f != nil && f.Values != nil && f.Values[ArgsFormField] != "" {
		_, sent := f.Values[ArgFieldPrefix+fl.Name]
		return sent && v != ""
	}
	return v == "on"
}

// multiline reports whether a text argument reads better in a text area.
func multiline(fl Field, value string) bool {
	return fl.Type == "string" && len(fl.Enum) == 0 && fl.Format == "" &&
		(strings.Contains(value, "\n") || utf8.RuneCountInString(value) > 60 || (fl.MaxLength != nil && *fl.MaxLength > 200))
}

// argID is the element id of an argument field of the card whose ids derive from key (Page.IDKey).
func argID(key, name string) string { return "arg-" + key + "-" + name }

// argInputType is an argument field's input type. Dates stay text: the field shows the value
// exactly as the call has it, so an untouched field approves the call unchanged.
func argInputType(fl Field) string {
	switch t := fl.InputType(); t {
	case "email", "url", "number":
		return t
	}
	return "text"
}

// approved reports whether a finished call ran on a person's approval: its card keeps the plan.
func approved(c agent.CallView) bool {
	return c.Plan != nil && c.Status != agent.CallAwaiting && strings.Contains(c.Decision, "approve")
}

// jsonSubmitted reports whether the card's arguments came back as JSON (an "args" field sent
// without the argument fields): the card then shows them as JSON again, with their errors.
func jsonSubmitted(f *FormState) bool {
	if f == nil || f.Values == nil {
		return false
	}
	_, sent := f.Values["args"]
	return sent && f.Values[ArgsFormField] == ""
}

// shownPlan is the plan PlanView shows for c, and whether it stands for an edit: the dry run's
// own while the call has the model's arguments; once an approver proposed or approved others,
// the arguments that run (or would), since the dry run described the model's.
func shownPlan(c agent.CallView) (*tools.Plan, bool) {
	if c.Plan == nil || len(argChanges(c.ModelArgs, c.Args)) == 0 {
		return c.Plan, false
	}
	summary := "Ran " + c.Name + " with the edited arguments:"
	switch {
	case c.Status == agent.CallAwaiting && c.PendingKind == tools.PendingApproval:
		summary = "Would run " + c.Name + " with the proposed arguments:"
	case !strings.Contains(c.Decision, "approve"):
		summary = c.Name + " with the edited arguments:"
	case c.Status == agent.CallRunning || c.Status == agent.CallAwaiting:
		summary = "Runs " + c.Name + " with the edited arguments:"
	}
	var v any
	if decodeNumbers(c.Args, &v) != nil {
		return &tools.Plan{Summary: summary, Details: map[string]any{"value": string(c.Args)}}, true
	}
	details, ok := v.(map[string]any)
	if !ok {
		details = map[string]any{"value": v}
	}
	return &tools.Plan{Summary: summary, Details: details}, true
}

// DemoReviewedTool is the demo's reviewer-gated tool: when it is offered, an empty inbox says
// how to make it ask.
const DemoReviewedTool = "deploy"

// inboxExplain says, on an empty inbox, what will arrive there: calls that need a reviewer
// (naming the tools that ask for one) and the viewer's own calls that wait for them.
func inboxExplain(reviewed []string) string {
	s := "Calls that need a reviewer arrive here, live, from anyone's conversations"
	if len(reviewed) > 0 {
		s += " (here: " + strings.Join(reviewed, ", ") + ")"
	}
	return s + ", with your own calls that wait for you. Approve or deny them here: the person who asked sees your decision at once."
}

// answerWords is a question's accepted answer as its card shows it ("You answered: …"): each
// answered field by its title, in the form's order, enum values by their labels; fields the
// form does not know follow by name. ok is false when the result is not an accepted answer.
func answerWords(c agent.CallView, result json.RawMessage) ([]kv, bool) {
	var ans struct {
		Action  string          `json:"action"`
		Content json.RawMessage `json:"content"`
	}
	if c.Prompt == nil || c.Prompt.URL != "" || json.Unmarshal(result, &ans) != nil || ans.Action != "accept" {
		return nil, false
	}
	var decoded any
	if decodeNumbers(ans.Content, &decoded) != nil {
		decoded = nil
	}
	content, _ := decoded.(map[string]any)
	fs, err := ParseFormSchema(c.Prompt.Schema)
	if err != nil {
		fs = FormSchema{}
	}
	var rows []kv
	seen := map[string]bool{}
	for _, f := range fs.OrderLike(c.Args).Fields {
		v, ok := content[f.Name]
		if !ok {
			continue
		}
		seen[f.Name] = true
		rows = append(rows, kv{f.Label, answerText(f, v)})
	}
	for _, k := range objectKeys(ans.Content) {
		if !seen[k] {
			text, _ := inlineText(content[k])
			if text == "" {
				text = clip(valueText(content[k]), maxValueText)
			}
			rows = append(rows, kv{humanKey(k), text})
		}
	}
	return rows, true
}

// answerText is one answered field in words: an enum value by its label, the rest as text.
func answerText(f Field, v any) string {
	if s, ok := v.(string); ok {
		for i, e := range f.Enum {
			if e == s {
				return clip(f.OptionLabel(i), maxValueText)
			}
		}
	}
	if text, ok := inlineText(v); ok {
		return text
	}
	return clip(valueText(v), maxValueText)
}

// httpWords is an HTTP tool's response as its card shows it: the status line ("200 OK") and
// the body, pretty-printed when it is JSON, to fold beneath. It reads both shapes the HTTP
// adapter answers: {"http_response": {...}} (a tools-file action) and the bare response.
type httpWords struct {
	Status    string // "200 OK"
	Body      string // "" when the response had none, or it was not kept
	Truncated bool
}

// httpResponseWords reads a result as an HTTP response; ok is false for any other shape.
func httpResponseWords(raw json.RawMessage) (httpWords, bool) {
	var v map[string]json.RawMessage
	if json.Unmarshal(raw, &v) != nil {
		return httpWords{}, false
	}
	if inner, ok := v["http_response"]; ok && len(v) == 1 {
		v = nil
		if json.Unmarshal(inner, &v) != nil {
			return httpWords{}, false
		}
	}
	var status int
	if json.Unmarshal(v["status"], &status) != nil || status < 100 || status > 599 {
		return httpWords{}, false
	}
	if h, ok := v["headers"]; !ok || !bytes.HasPrefix(bytes.TrimSpace(h), []byte("{")) {
		return httpWords{}, false // a "status" alone is some other tool's result
	}
	w := httpWords{Status: strings.TrimSpace(fmt.Sprintf("%d %s", status, http.StatusText(status)))}
	_ = json.Unmarshal(v["body_truncated"], &w.Truncated)
	if body, ok := v["body"]; ok {
		var s string
		if json.Unmarshal(body, &s) == nil {
			if t := strings.TrimSpace(s); (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) && json.Valid([]byte(t)) {
				s = prettyJSON(json.RawMessage(t)) // JSON sent without a JSON content type
			}
			w.Body = clip(s, maxPlainText)
		} else if b := bytes.TrimSpace(body); len(b) > 0 && string(b) != "null" {
			w.Body = clip(prettyJSON(b), maxPlainText)
		}
	}
	return w, true
}

// openQuestion reports whether a question waits in v for its answer: a message sent now would
// close it unanswered (the turn moves on), so the composer warns.
func openQuestion(v agent.View) bool {
	for _, c := range v.Calls {
		if c.Awaiting() && c.PendingKind == tools.PendingElicitation {
			return true
		}
	}
	return false
}

// argsErrored reports whether the server refused the card's arguments: the card then opens its
// Edit disclosure, where the errors stand beside the fields.
func argsErrored(f *FormState) bool {
	if f == nil {
		return false
	}
	for name := range f.Errors {
		if name == "args" || strings.HasPrefix(name, ArgFieldPrefix) {
			return true
		}
	}
	return false
}

// answered reports whether c is a question its person answered: AnswerView then says so, in
// place of the decision line.
func answered(c agent.CallView) bool {
	if c.Decision != "accept" {
		return false
	}
	env, ok := parseEnvelope(c.Result)
	if !ok {
		return false
	}
	_, ok = answerWords(c, env.Result)
	return ok
}

// answeredBy starts an answer's card: "You answered:" to the one who answered, else their name.
func answeredBy(p Page, c agent.CallView) string {
	switch {
	case c.DecidedBy != "" && c.DecidedBy == p.Viewer.Principal.UserID:
		return "You answered:"
	case p.Names[c.DecidedBy] != "":
		return p.Names[c.DecidedBy] + " answered:"
	}
	return "Answered:"
}
