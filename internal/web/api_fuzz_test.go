package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"parley/internal/fault"
	"parley/internal/tools"
)

// FuzzResolveBody: whatever a client sends as a resolve body, decoding and the agent's shape
// check (Resolution.Kind, which Resolve applies before anything else) either accept it as exactly one kind of resolution or refuse it with a 4xx kind; they never
// panic and never call it internal.
func FuzzResolveBody(f *testing.F) {
	for _, seed := range []string{
		`{"decision":"approve"}`, `{"decision":"approve","args":{"to":"x"}}`, `{"decision":"deny","reason":"no"}`,
		`{"action":"accept","content":{"a":1}}`, `{"action":"cancel"}`, `{"result":{"lat":1}}`, `{"error":{"message":"x"}}`,
		`{"decision":"approve","action":"accept"}`, `{"args":null}`, `{"error":null}`, `[]`, `{`, `null`, `{"result":1}{}`,
		`{"error":{"message":"x","code":1}}`, `{"decision":5}`,
	} {
		f.Add(seed)
	}
	e := echo.New()
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Body = http.MaxBytesReader(nil, req.Body, 1<<16)
		c := e.NewContext(req, httptest.NewRecorder())
		var in resolveRequest
		if err := decodeJSON(c, &in, false); err != nil {
			te, internal := classify(err)
			if internal || statusOf(te.Kind) >= 500 || statusOf(te.Kind) < 400 {
				t.Fatalf("decode %q: %v", body, err)
			}
			return
		}
		r := in.resolution()
		kind, terr := r.Kind()
		if terr != nil {
			if fault.KindOf(terr) != fault.KindInvalidArgs {
				t.Fatalf("shape %q: %v", body, terr)
			}
			return
		}
		switch kind {
		case tools.PendingApproval:
			if r.Decision != "approve" && r.Decision != "deny" {
				t.Fatalf("accepted approval %q", body)
			}
		case tools.PendingElicitation:
			if r.Action != "accept" && r.Action != "decline" && r.Action != "cancel" {
				t.Fatalf("accepted elicitation %q", body)
			}
		case tools.PendingClientExec:
			if given(r.Result) == (r.Error != nil) {
				t.Fatalf("accepted client result %q", body)
			}
		default:
			t.Fatalf("kind %q for %q", kind, body)
		}
	})
}

// given reports whether a raw JSON field was sent (JSON null counts as absent).
func given(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}
