package mcpadapter

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"parley/internal/metrics"
)

// The servers' state is read when Prometheus scrapes (like the agent's snapshot), from every
// started Manager: a gauge moved by each code path could drift from the truth.
var (
	upDesc = prometheus.NewDesc("parley_mcp_server_up",
		"1 when the MCP server is connected, else 0.", []string{"server"}, nil)
	toolsDesc = prometheus.NewDesc("parley_mcp_server_tools",
		"Tools of the MCP server in the registry.", []string{"server"}, nil)
	restartsDesc = prometheus.NewDesc("parley_mcp_server_restarts_total",
		"Times the MCP server's connection was started again after a failure.", []string{"server"}, nil)

	progressDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_mcp_progress_dropped_total",
		Help: "Progress notifications dropped because the call's queue was full.",
	}, []string{"server"})
)

var (
	liveMu   sync.Mutex
	live     = map[*Manager]bool{} // guarded by liveMu: started, not yet stopped
	register = func(m *Manager) func() {
		liveMu.Lock()
		live[m] = true
		liveMu.Unlock()
		return func() {
			liveMu.Lock()
			delete(live, m)
			liveMu.Unlock()
		}
	}
)

type collector struct{}

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upDesc
	ch <- toolsDesc
	ch <- restartsDesc
}

func (collector) Collect(ch chan<- prometheus.Metric) {
	liveMu.Lock()
	ms := make([]*Manager, 0, len(live))
	for m := range live {
		ms = append(ms, m)
	}
	liveMu.Unlock()
	seen := map[string]bool{}
	for _, m := range ms {
		for _, st := range m.Status() {
			if seen[st.Name] { // tests may run two managers with one server name
				continue
			}
			seen[st.Name] = true
			up := 0.0
			if st.State == StateUp {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up, st.Name)
			ch <- prometheus.MustNewConstMetric(toolsDesc, prometheus.GaugeValue, float64(st.Tools), st.Name)
			ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(st.Restarts), st.Name)
		}
	}
}

func init() {
	metrics.Registry.MustRegister(collector{}, progressDropped)
}
