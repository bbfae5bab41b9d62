package demo

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// This file drives tools that come from a tool source under a prefix (an MCP server's tools are
// "<server>__<tool>") from ordinary words, generically: nothing here knows a server. A message
// picks the tool whose name's action word (add, list, delete, …, or a synonym) and whose other
// name words (the thing it acts on: "note" for add_note) it mentions; the arguments come from
// the tool's input schema: each required string gets what the message says after a colon, a
// quote or the thing's name ("save a note: buy milk" → {"text": "buy milk"}), numbers the
// first number in it, booleans true, enums the value it names.

// prefixSep separates a tool source's name from its tool's name.
const prefixSep = "__"

// definition is what the demo reads of a tool definition.
type definition struct {
	name   string
	desc   string
	schema inputSchema
}

type inputSchema struct {
	Properties map[string]struct {
		Type json.RawMessage `json:"type"`
		Enum []any           `json:"enum"`
	} `json:"properties"`
	Required []string `json:"required"`
}

// parseDefinition reads a definition in OpenAI ({"function":{…,"parameters"}}) or Anthropic
// ({…,"input_schema"}) shape.
func parseDefinition(raw []byte) definition {
	var t struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
		Function    struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &t) != nil {
		return definition{}
	}
	d := definition{name: t.Name, desc: t.Description}
	schema := t.InputSchema
	if t.Function.Name != "" {
		d.name, d.desc, schema = t.Function.Name, t.Function.Description, t.Function.Parameters
	}
	if len(schema) > 0 {
		_ = json.Unmarshal(schema, &d.schema) // a schema the demo cannot read gives no arguments
	}
	return d
}

// verbs maps words people use to the action words tool names use; a tool's action is its name's
// first word, mapped the same way.
var verbs = map[string]string{
	"add": "add", "save": "add", "create": "add", "new": "add", "write": "add", "store": "add",
	"remember": "add", "put": "add", "append": "add", "insert": "add", "make": "add", "post": "add", "set": "add",
	"list": "list", "show": "list", "see": "list", "display": "list", "read": "list", "view": "list",
	"get": "list", "fetch": "list", "find": "list", "lookup": "list", "look": "list", "search": "list", "what": "list",
	"delete": "delete", "remove": "delete", "clear": "delete", "erase": "delete", "wipe": "delete", "drop": "delete",
	"forget": "delete", "purge": "delete",
	"update": "update", "edit": "update", "change": "update", "rename": "update", "modify": "update",
	"ask": "ask", "greet": "ask",
}

var wordRE = regexp.MustCompile(`[a-z0-9]+`)

// stem folds a plural onto its singular, enough for "notes" to find "note".
func stem(w string) string {
	switch {
	case len(w) > 4 && strings.HasSuffix(w, "ies"):
		return w[:len(w)-3] + "y"
	case len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss"):
		return w[:len(w)-1]
	}
	return w
}

func canonical(w string) string {
	if v := verbs[w]; v != "" {
		return v
	}
	return w
}

// prefixedCandidate is a prefixed tool and how well the message names it.
type prefixedCandidate struct {
	def    definition
	source string // the prefix: the server's name
	remote string // the tool's name at its source
	object string // the name word the message used for the thing it acts on
	score  int
}

// prefixed answers a message that names one of the offered prefixed tools; it reports whether
// one matched.
func prefixed(b *builder, defs []definition, text string) bool {
	lower := strings.ToLower(text)
	said := map[string]bool{}
	for _, w := range wordRE.FindAllString(lower, -1) {
		said[stem(w)] = true
		said[canonical(stem(w))] = true
		said[canonical(w)] = true
	}
	var best *prefixedCandidate
	for _, d := range defs {
		source, remote, ok := strings.Cut(d.name, prefixSep)
		if !ok || source == "" || remote == "" {
			continue
		}
		words := wordRE.FindAllString(strings.ToLower(remote), -1)
		if len(words) == 0 {
			continue
		}
		// The action must be said; so must one of the other name words (or the source's name),
		// so that "list my notes" does not call list_users.
		action := canonical(stem(words[0]))
		if !said[action] {
			continue
		}
		c := prefixedCandidate{def: d, source: source, remote: remote, score: 2}
		for _, w := range append(words[1:], strings.ToLower(source)) {
			if w = stem(w); said[w] {
				c.score += 2
				if c.object == "" {
					c.object = w
				}
			}
		}
		if c.object == "" {
			continue
		}
		if best == nil || c.score > best.score || c.score == best.score && len(words) < len(wordRE.FindAllString(strings.ToLower(best.remote), -1)) {
			best = &c
		}
	}
	if best == nil {
		return false
	}
	args, missing := prefixedArgs(best.def.schema, text, best.object)
	if len(missing) > 0 {
		b.text = fmt.Sprintf("I would use **%s** of the tool source *%s* for that, but it needs %s: say it after a colon, as in *%s: …*.",
			best.remote, best.source, strings.Join(missing, " and "), strings.ReplaceAll(best.remote, "_", " "))
		return true
	}
	b.text = fmt.Sprintf("I'll use **%s** of the tool source *%s*.", best.remote, best.source)
	b.call(best.def.name, args)
	return true
}

var (
	numberRE = regexp.MustCompile(`-?\d+(?:\.\d+)?`)
	quotedRE = regexp.MustCompile(`["“']([^"”']+)["”']`)
)

// payload is what a message gives as the value of a tool's text: after a colon, in quotes, or
// after the word naming the thing ("add a note buy milk").
func payload(text, object string) string {
	if _, after, ok := strings.Cut(text, ":"); ok && strings.TrimSpace(after) != "" {
		return strings.TrimSpace(after)
	}
	if m := quotedRE.FindStringSubmatch(text); m != nil {
		return strings.TrimSpace(m[1])
	}
	lower := strings.ToLower(text)
	for _, w := range []string{object + "s", object} {
		if i := strings.Index(lower, w+" "); i >= 0 {
			rest := strings.TrimSpace(text[i+len(w):])
			for _, lead := range []string{"saying ", "that ", "which says ", "with ", "called ", "named ", "of ", "to "} {
				if len(rest) > len(lead) && strings.EqualFold(rest[:len(lead)], lead) {
					rest = strings.TrimSpace(rest[len(lead):])
					break
				}
			}
			return rest
		}
	}
	return ""
}

// prefixedArgs fills a tool's required arguments from the message; missing lists those it could
// not fill.
func prefixedArgs(s inputSchema, text, object string) (map[string]any, []string) {
	args := map[string]any{}
	var missing []string
	req := append([]string(nil), s.Required...)
	sort.Strings(req)
	lower := strings.ToLower(text)
	for _, name := range req {
		p := s.Properties[name]
		var typ string
		_ = json.Unmarshal(p.Type, &typ) // a list of types reads as none: treated as a string
		switch {
		case len(p.Enum) > 0:
			v := p.Enum[0]
			for _, e := range p.Enum {
				if strings.Contains(lower, strings.ToLower(fmt.Sprint(e))) {
					v = e
					break
				}
			}
			args[name] = v
		case typ == "integer" || typ == "number":
			m := numberRE.FindString(text)
			if m == "" {
				missing = append(missing, "a number for *"+name+"*")
				continue
			}
			if typ == "integer" {
				n, _ := strconv.Atoi(strings.SplitN(m, ".", 2)[0])
				args[name] = n
			} else {
				f, _ := strconv.ParseFloat(m, 64)
				args[name] = f
			}
		case typ == "boolean":
			args[name] = true
		case typ == "object":
			args[name] = map[string]any{}
		case typ == "array":
			args[name] = []any{}
		default:
			v := payload(text, object)
			if v == "" {
				missing = append(missing, "its *"+name+"*")
				continue
			}
			args[name] = v
		}
	}
	return args, missing
}

// prefixedHints are lines for the plain answer: a phrase for each prefixed tool offered (at most
// a few).
func prefixedHints(defs []definition) []string {
	var out []string
	for _, d := range defs {
		source, remote, ok := strings.Cut(d.name, prefixSep)
		if !ok || source == "" || remote == "" {
			continue
		}
		if len(out) == 6 {
			break
		}
		phrase := strings.ReplaceAll(remote, "_", " ")
		if len(d.schema.Required) > 0 {
			phrase += ": …"
		}
		out = append(out, fmt.Sprintf("- *%s*: the tool %s of %s", phrase, remote, source))
	}
	return out
}
