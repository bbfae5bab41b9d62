package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func scrape(t *testing.T) string {
	t.Helper()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

func TestHandlerExposesParleyMetrics(t *testing.T) {
	ResolveSeconds.WithLabelValues("ok").Observe(0.002)
	ExpiriesFired.Inc()
	body := scrape(t)
	for _, want := range []string{
		`parley_resolve_seconds_count{outcome="ok"} 1`,
		"parley_expiries_fired_total 1",
		// State series exist before anything registers a source.
		"parley_live_actors 0",
		`parley_pending_calls{kind="approval"} 0`,
		`parley_dropped_frames_total{where="socket"} 0`,
		"parley_sockets 0",
		"go_goroutines",
		"process_resident_memory_bytes",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics output lacks %q", want)
		}
	}
}

// TestSourcesAreSummedAndRemovable: two sources add up at scrape time, an unregistered one
// stops counting, and unregistering twice is harmless.
func TestSourcesAreSummedAndRemovable(t *testing.T) {
	one := Register(func() Snapshot {
		return Snapshot{LiveActors: 2, Pending: map[string]int{"approval": 1}, Dropped: map[string]int64{"subscriber": 4}}
	})
	two := Register(func() Snapshot {
		return Snapshot{LiveActors: 3, Sockets: 5, Pending: map[string]int{"approval": 2, "elicitation": 1}}
	})
	body := scrape(t)
	for _, want := range []string{
		"parley_live_actors 5",
		`parley_pending_calls{kind="approval"} 3`,
		`parley_pending_calls{kind="elicitation"} 1`,
		`parley_pending_calls{kind="client_exec"} 0`,
		"parley_sockets 5",
		`parley_dropped_frames_total{where="subscriber"} 4`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics output lacks %q", want)
		}
	}
	two()
	two()
	body = scrape(t)
	if !strings.Contains(body, "parley_live_actors 2") || !strings.Contains(body, `parley_pending_calls{kind="approval"} 1`) {
		t.Errorf("after unregistering: %s", grep(body, "parley_"))
	}
	one()
	if got := Collect(); got.LiveActors != 0 || len(got.Pending) != 0 {
		t.Errorf("with no sources: %+v", got)
	}
}

func grep(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
