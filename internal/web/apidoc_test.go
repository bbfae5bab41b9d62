package web

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/tools/webhook"
)

// apiDoc is the API's documentation, relative to this package.
const apiDoc = "../../docs/api.md"

// docType is a type docs/api.md shows an example of, and how its examples are checked.
type docType struct {
	new  func() any
	mode docMode
}

// docMode is how an example is checked.
type docMode int

const (
	// request: a JSON API body, decoded as the server decodes it (decodeJSON: unknown, repeated
	// and case-variant keys refused). Every request type needs an example.
	request docMode = iota
	// inbound: something else Parley reads (a socket frame), decoded with unknown fields refused.
	inbound
	// outbound: something Parley writes, decoded with unknown fields refused and encoded again:
	// a field the type writes that the example lacks fails too, so an example stays whole as
	// its type grows.
	outbound
)

// apiDocTypes are the types an example may be marked with (<!-- type: NAME --> on the line
// before its ```json fence).
var apiDocTypes = map[string]docType{
	// Requests, decoded by decodeJSON.
	"createConversationRequest": {func() any { return new(createConversationRequest) }, request},
	"sendMessageRequest":        {func() any { return new(sendMessageRequest) }, request},
	"renameRequest":             {func() any { return new(renameRequest) }, request},
	"resolveRequest":            {func() any { return new(resolveRequest) }, request},
	"planRequest":               {func() any { return new(planRequest) }, request},
	"bulkResolveRequest":        {func() any { return new(bulkResolveRequest) }, request},
	// Answers of the JSON API.
	"errorBody":            {func() any { return new(errorBody) }, outbound},
	"okJSON":               {func() any { return new(okJSON) }, outbound},
	"sentJSON":             {func() any { return new(sentJSON) }, outbound},
	"createdJSON":          {func() any { return new(createdJSON) }, outbound},
	"renamedJSON":          {func() any { return new(renamedJSON) }, outbound},
	"conversationListJSON": {func() any { return new(conversationListJSON) }, outbound},
	"viewJSON":             {func() any { return new(viewJSON) }, outbound},
	"planResponseJSON":     {func() any { return new(planResponseJSON) }, outbound},
	"approvalListJSON":     {func() any { return new(approvalListJSON) }, outbound},
	"bulkResponseJSON":     {func() any { return new(bulkResponseJSON) }, outbound},
	"claimJSON":            {func() any { return new(claimJSON) }, outbound},
	"grantListJSON":        {func() any { return new(grantListJSON) }, outbound},
	"auditPageJSON":        {func() any { return new(auditPageJSON) }, outbound},
	"readyJSON":            {func() any { return new(readyJSON) }, outbound},
	// The event stream, the sockets and the webhooks.
	"entryJSON":          {func() any { return new(entryJSON) }, outbound},
	"agent.Event":        {func() any { return new(agent.Event) }, outbound},
	"frame":              {func() any { return new(frame) }, outbound},
	"clientFrame":        {func() any { return new(clientFrame) }, inbound},
	"webhook.Payload":    {func() any { return new(webhook.Payload) }, outbound},
	"agent.Notification": {func() any { return new(agent.Notification) }, outbound},
}

// docExample is one ```json block of the page: its type's name, its body and its line.
type docExample struct {
	typ, body string
	line      int
}

// apiExamples reads every ```json block of docs/api.md with the type marked before it.
func apiExamples(t *testing.T) []docExample {
	t.Helper()
	b, err := os.ReadFile(apiDoc)
	if err != nil {
		t.Fatal(err)
	}
	marker := regexp.MustCompile(`^<!-- type: ([A-Za-z.]+) -->$`)
	lines := strings.Split(string(b), "\n")
	var out []docExample
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```json" {
			continue
		}
		ex := docExample{line: i + 1}
		if i > 0 {
			if m := marker.FindStringSubmatch(strings.TrimSpace(lines[i-1])); m != nil {
				ex.typ = m[1]
			}
		}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		ex.body = strings.Join(body, "\n")
		out = append(out, ex)
	}
	return out
}

// TestAPIDocExamples: every JSON example of docs/api.md names its type and decodes into it as
// the server would, every body the server decodes has an example, and no example leaves out a
// field its type writes.
func TestAPIDocExamples(t *testing.T) {
	examples := apiExamples(t)
	if len(examples) < 20 {
		t.Fatalf("found only %d examples in %s", len(examples), apiDoc)
	}
	shown := map[string]bool{}
	for _, ex := range examples {
		at := fmt.Sprintf("docs/api.md:%d", ex.line)
		dt, ok := apiDocTypes[ex.typ]
		if !ok {
			t.Errorf("%s: the example is not marked with a known type (<!-- type: NAME --> before it): %q", at, ex.typ)
			continue
		}
		shown[ex.typ] = true
		v := dt.new()
		if dt.mode == request {
			if err := decodeRequest(ex.body, v); err != nil {
				t.Errorf("%s: the server refuses this %s: %v", at, ex.typ, err)
			}
			continue
		}
		if err := decodeStrict(ex.body, v); err != nil {
			t.Errorf("%s: does not decode into %s: %v", at, ex.typ, err)
			continue
		}
		if dt.mode != outbound {
			continue
		}
		if err := sameFields(ex.body, v); err != nil {
			t.Errorf("%s: %s: %v", at, ex.typ, err)
		}
	}
	for name, dt := range apiDocTypes {
		if dt.mode == request && !shown[name] {
			t.Errorf("docs/api.md has no example of the request body %s", name)
		}
	}
}

// TestAPIDocCatchesStaleExamples: the checks above fail on the mistakes they are for.
func TestAPIDocCatchesStaleExamples(t *testing.T) {
	if decodeRequest(`{"decision": "approve", "note": "x"}`, new(resolveRequest)) == nil {
		t.Error("a request with an unknown field was accepted")
	}
	if decodeRequest(`{"Decision": "approve"}`, new(resolveRequest)) == nil {
		t.Error("a request with a field in another case was accepted")
	}
	if decodeStrict(`{"ok": true, "gone": 1}`, new(okJSON)) == nil {
		t.Error("an answer with an unknown field was accepted")
	}
	v := new(renamedJSON)
	if err := decodeStrict(`{"ok": true, "id": "c1"}`, v); err != nil || sameFields(`{"ok": true, "id": "c1"}`, v) == nil {
		t.Errorf("an answer lacking a field passed (%v)", err)
	}
}

// decodeRequest decodes body into v as the server decodes a request body.
func decodeRequest(body string, v any) error {
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	c := echo.New().NewContext(req, httptest.NewRecorder())
	return decodeJSON(c, v, false)
}

// decodeStrict decodes body, exactly one JSON value, into v, refusing unknown fields.
func decodeStrict(body string, v any) error {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("more than one JSON value")
	}
	return nil
}

// sameFields reports where v, encoded again, has an object key the example body lacks (or
// the other way round: a zero value the type leaves out).
func sameFields(body string, v any) error {
	again, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var want, got any
	if err := json.Unmarshal([]byte(body), &want); err != nil {
		return err
	}
	if err := json.Unmarshal(again, &got); err != nil {
		return err
	}
	return compareKeys("", want, got)
}

func compareKeys(path string, example, encoded any) error {
	switch e := example.(type) {
	case map[string]any:
		g, ok := encoded.(map[string]any)
		if !ok {
			return nil
		}
		for k := range g {
			if _, ok := e[k]; !ok {
				return fmt.Errorf("the example lacks %s/%s, which the type always writes", path, k)
			}
		}
		keys := make([]string, 0, len(e))
		for k := range e {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("the example shows %s/%s, which the type leaves out here (a zero value)", path, k)
			}
			if err := compareKeys(path+"/"+k, e[k], gv); err != nil {
				return err
			}
		}
	case []any:
		g, ok := encoded.([]any)
		if !ok {
			return nil
		}
		for i := range min(len(e), len(g)) {
			if err := compareKeys(fmt.Sprintf("%s/%d", path, i), e[i], g[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestAPIDocRoutes: every route of the route table is on docs/api.md, as "METHOD /path" with
// its parameters in braces.
func TestAPIDocRoutes(t *testing.T) {
	b, err := os.ReadFile(apiDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := regexp.MustCompile(`\{[a-z_]+\}`).ReplaceAllString(string(b), "{}")
	param := regexp.MustCompile(`:[a-z_]+`)
	var missing []string
	for _, r := range (&Server{}).routes().Routes() {
		if strings.HasSuffix(r.Path, "/api/v1/*") || r.Method == echo.RouteNotFound {
			continue // the API's catch-all and echo's own: an unknown endpoint is 404
		}
		path := strings.ReplaceAll(param.ReplaceAllString(r.Path, "{}"), "*", "…")
		if !documented(doc, r.Method, path) {
			missing = append(missing, r.Method+" "+r.Path)
		}
	}
	slices.Sort(missing)
	missing = slices.Compact(missing)
	for _, m := range missing {
		t.Errorf("docs/api.md does not document %s", m)
	}
}

// documented reports whether doc names the route as "METHOD path" in a code span, where the
// path may be followed by a query, another route of the same span (", "), or the span's end.
func documented(doc, method, path string) bool {
	needle := method + " " + path
	for rest := doc; ; {
		i := strings.Index(rest, needle)
		if i < 0 {
			return false
		}
		rest = rest[i+len(needle):]
		if rest == "" || strings.ContainsRune("`[?, ", rune(rest[0])) {
			return true
		}
	}
}
