package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"parley/internal/fault"
	"parley/internal/store"
)

// TestSearchBudget: searches spend a budget of their own, stricter than the API's (a search
// costs the database far more than any other read): past its burst a search is 429 with
// Retry-After, on the API and on the page alike, while the plain list (no q) and the other
// API routes still answer; another person's budget is untouched; it refills with time.
func TestSearchBudget(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, openSQLite, Config{SearchesPerMinute: 6, SearchBurst: 3})
	ann := e.user("ann", store.RoleMember)
	bob := e.user("bob", store.RoleMember)
	api, page := e.script(ann), e.browser(ann)
	for i := range 3 {
		path := fmt.Sprintf("/api/v1/conversations?q=budget%d", i)
		if i == 2 {
			if res := page.do("GET", "/conversations?q=budget", "", nil); res.StatusCode != http.StatusOK {
				t.Fatalf("page search %d = %d", i, res.StatusCode)
			}
			continue
		}
		if res := api.api("GET", path, ""); res.StatusCode != http.StatusOK {
			t.Fatalf("search %d = %d", i, res.StatusCode)
		}
	}
	res := api.api("GET", "/api/v1/conversations?q=budget", "")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "10" || decodeEnvelope(t, res).Error.Kind != fault.KindRateLimited {
		t.Fatalf("a search past the budget = %d Retry-After %q, want 429 after 10 s", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if res := page.do("GET", "/conversations?q=budget", "", nil); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a page search past the budget = %d, want 429", res.StatusCode)
	}
	for _, path := range []string{"/api/v1/conversations", "/api/v1/conversations?q=+"} {
		if res := api.api("GET", path, ""); res.StatusCode != http.StatusOK {
			t.Fatalf("the list %q with the search budget spent = %d", path, res.StatusCode)
		}
	}
	if res := e.script(bob).api("GET", "/api/v1/conversations?q=budget", ""); res.StatusCode != http.StatusOK {
		t.Fatalf("another person's search = %d", res.StatusCode)
	}
	e.clk.Advance(10 * time.Second)
	if res := api.api("GET", "/api/v1/conversations?q=budget", ""); res.StatusCode != http.StatusOK {
		t.Fatalf("a search after the refill = %d", res.StatusCode)
	}
}

// slowSearch is a store whose searches the database stops at their timeout.
type slowSearch struct{ store.Store }

func (slowSearch) FindConversations(context.Context, string, string, int) ([]store.SearchHit, error) {
	return nil, fmt.Errorf("find conversations: %w: canceling statement due to statement timeout", store.ErrSearchTimeout)
}

// TestSearchTimeoutAnswer: a search the database stopped at its timeout is a clear answer —
// 422 timeout in the API's envelope, the page saying the search was stopped, with its box to
// narrow it — never a 500.
func TestSearchTimeoutAnswer(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, openSQLite, Config{}, withAgentStore(func(st store.Store) store.Store { return slowSearch{st} }))
	ann := e.user("ann", store.RoleMember)
	res := e.script(ann).api("GET", "/api/v1/conversations?q=lorem+ipsum", "")
	if res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("API search stopped at its timeout = %d, want 422", res.StatusCode)
	}
	if eb := decodeEnvelope(t, res); eb.Error.Kind != fault.KindTimeout || !strings.Contains(eb.Error.Message, "took longer than") || eb.Error.Details["timeout_seconds"] != float64(2) {
		t.Fatalf("API search stopped at its timeout = %+v", eb.Error)
	}
	res = e.browser(ann).do("GET", "/conversations?q=lorem+ipsum", "", nil)
	if body := readBody(res); res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "This search was stopped") || !strings.Contains(body, `data-parley="search"`) {
		t.Fatalf("page search stopped at its timeout = %d:\n%s", res.StatusCode, body)
	}
}
