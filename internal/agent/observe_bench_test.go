package agent

import (
	"context"
	"runtime"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"parley/internal/telemetry"
)

// BenchmarkApproveTracing puts the approve path (BenchmarkApprovePath) with tracing off beside
// the same path with tracing on (an SDK provider batching to an exporter that drops the spans,
// so the figure is Parley's and the SDK's cost, not a network's), alternating one approval of
// each, so both see the same machine. It reports each side's median wall time, mean CPU and
// mean allocations per approval, and the on/off ratios.
func BenchmarkApproveTracing(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	off := newApproveBench(b, b.N, nil)
	on := newApproveBench(b, b.N, func(c *Config) { c.Tracer = telemetry.FromProvider(tp, nil) })
	type side struct {
		wall          []time.Duration
		cpu           time.Duration
		mallocs, byts uint64
	}
	var sides [2]side
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var ms runtime.MemStats
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, ab := range []*approveBench{off, on} {
			if i%2 == 1 {
				k, ab = 1-k, []*approveBench{off, on}[1-k] // alternate which side goes first
			}
			runtime.ReadMemStats(&ms)
			m0, b0 := ms.Mallocs, ms.TotalAlloc
			c0, t0 := cpu(), time.Now()
			ab.approve(b, i)
			sides[k].wall = append(sides[k].wall, time.Since(t0))
			sides[k].cpu += cpu() - c0
			runtime.ReadMemStats(&ms)
			sides[k].mallocs += ms.Mallocs - m0
			sides[k].byts += ms.TotalAlloc - b0
		}
	}
	b.StopTimer()
	n := float64(b.N)
	for k, name := range []string{"off", "on"} {
		s := sides[k]
		b.ReportMetric(float64(percentile(s.wall, 0.5).Microseconds()), name+"-p50-µs")
		b.ReportMetric(float64(s.cpu.Microseconds())/n, name+"-cpu-µs/op")
		b.ReportMetric(float64(s.mallocs)/n, name+"-allocs/op")
		b.ReportMetric(float64(s.byts)/n/1024, name+"-KB/op")
	}
	b.ReportMetric(float64(percentile(sides[1].wall, 0.5))/float64(percentile(sides[0].wall, 0.5)), "on/off-p50")
	b.ReportMetric(float64(sides[1].cpu)/float64(sides[0].cpu), "on/off-cpu")
	b.ReportMetric(float64(sides[1].mallocs)/float64(sides[0].mallocs), "on/off-allocs")
}
