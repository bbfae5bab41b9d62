package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandlerExposesParleyMetrics(t *testing.T) {
	LiveActors.Set(3)
	Pending.WithLabelValues("approval").Set(2)
	ResolveSeconds.WithLabelValues("ok").Observe(0.002)
	ExpiriesFired.Inc()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		"parley_live_actors 3",
		`parley_pending_calls{kind="approval"} 2`,
		`parley_resolve_seconds_count{outcome="ok"} 1`,
		"parley_expiries_fired_total 1",
		"go_goroutines",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics output lacks %q", want)
		}
	}
}
