package metrics

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Snapshot is what a source reports at scrape time. Values that are state (actors in memory,
// pending calls, open sockets) are read when Prometheus asks rather than kept in gauges that
// every code path would have to move in step, so they cannot drift. The values of every
// registered source are summed (tests run several managers in one process).
type Snapshot struct {
	// LiveActors is the number of conversation actors in memory.
	LiveActors int
	// Pending counts suspended calls by pending kind (approval, elicitation, client_exec).
	Pending map[string]int
	// Sockets is the number of open WebSocket connections.
	Sockets int64
	// Dropped counts, by where ("subscriber", "socket"), queues that overflowed and forced the
	// reader to resync. It is a running total of the source's lifetime.
	Dropped map[string]int64
}

var (
	sourcesMu sync.Mutex
	sources   = map[int]func() Snapshot{} // guarded by sourcesMu
	nextID    int                         // guarded by sourcesMu
)

// Register adds a source read at every scrape; the returned function removes it (call it when
// the source stops, e.g. a Manager's Close). f must be cheap and safe to call from any
// goroutine.
func Register(f func() Snapshot) (unregister func()) {
	sourcesMu.Lock()
	id := nextID
	nextID++
	sources[id] = f
	sourcesMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			sourcesMu.Lock()
			delete(sources, id)
			sourcesMu.Unlock()
		})
	}
}

// Collect sums the registered sources.
func Collect() Snapshot {
	sourcesMu.Lock()
	fs := make([]func() Snapshot, 0, len(sources))
	for _, f := range sources {
		fs = append(fs, f)
	}
	sourcesMu.Unlock()
	total := Snapshot{Pending: map[string]int{}, Dropped: map[string]int64{}}
	for _, f := range fs {
		s := f()
		total.LiveActors += s.LiveActors
		total.Sockets += s.Sockets
		for k, n := range s.Pending {
			total.Pending[k] += n
		}
		for k, n := range s.Dropped {
			total.Dropped[k] += n
		}
	}
	return total
}

// PendingKinds are the pending kinds always exported (as 0 when none), so a dashboard's series
// exist before the first suspension.
var PendingKinds = []string{"approval", "elicitation", "client_exec"}

// DropPlaces are the places a queue can overflow, always exported.
var DropPlaces = []string{"subscriber", "socket"}

var (
	liveActorsDesc = prometheus.NewDesc("parley_live_actors", "Conversation actors in memory.", nil, nil)
	pendingDesc    = prometheus.NewDesc("parley_pending_calls", "Suspended tool calls by kind.", []string{"kind"}, nil)
	socketsDesc    = prometheus.NewDesc("parley_sockets", "Open WebSocket connections.", nil, nil)
	droppedDesc    = prometheus.NewDesc("parley_dropped_frames_total",
		"Queue overflows that forced a resync, by where (subscriber: an event subscription; socket: a page socket's send queue).",
		[]string{"where"}, nil)
)

// scraped is the collector of the Snapshot values.
type scraped struct{}

func (scraped) Describe(ch chan<- *prometheus.Desc) {
	ch <- liveActorsDesc
	ch <- pendingDesc
	ch <- socketsDesc
	ch <- droppedDesc
}

func (scraped) Collect(ch chan<- prometheus.Metric) {
	s := Collect()
	ch <- prometheus.MustNewConstMetric(liveActorsDesc, prometheus.GaugeValue, float64(s.LiveActors))
	ch <- prometheus.MustNewConstMetric(socketsDesc, prometheus.GaugeValue, float64(s.Sockets))
	for _, k := range withDefaults(PendingKinds, s.Pending) {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(s.Pending[k]), k)
	}
	for _, k := range withDefaults(DropPlaces, s.Dropped) {
		ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(s.Dropped[k]), k)
	}
}

// withDefaults is the sorted union of the always-exported labels and the ones present.
func withDefaults[V int | int64](always []string, m map[string]V) []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range always {
		seen[k] = true
		out = append(out, k)
	}
	for k := range m {
		if !seen[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
