package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"parley/internal/loadgen"
	"parley/internal/metrics"
)

// TestLoadSmall is the load run in miniature, through the real app (embedded store, demo model)
// and the same engine as cmd/loadgen: five conversations at once, each approving a gated call
// and answering a question over the public API and event streams, with no errors; afterwards
// nothing is pending and the metrics saw the resolves.
func TestLoadSmall(t *testing.T) {
	r := start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: r.url, Token: r.token, Conversations: 5, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 0 {
		t.Fatalf("%d errors: %s", rep.Errors, strings.Join(rep.FirstErrors, "; "))
	}
	if rep.Turns != 10 || len(rep.Resolve) != 10 || len(rep.Turn) != 10 {
		t.Fatalf("turns %d, resolves %d, turn samples %d; want 10 each", rep.Turns, len(rep.Resolve), len(rep.Turn))
	}
	if rep.ServerRSS <= 0 {
		t.Fatalf("no server RSS from /metrics")
	}
	if p := metrics.Collect().Pending; p["approval"]+p["elicitation"] != 0 {
		t.Fatalf("calls still pending after the run: %v", p)
	}
}
