package mcpadapter_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"parley/internal/tools/mcpadapter"
	"parley/internal/tools/mcpadapter/mcptest"
)

// TestMeasureHugeToolsList measures this process's memory while an MCP server (a child
// process, so that its own memory is not counted) answers tools/list with MCPTEST_MEASURE
// megabytes (docs/benchmarks.md):
//
//	MCPTEST_MEASURE=150 go test -count=1 -run TestMeasureHugeToolsList -v ./internal/tools/mcpadapter/
func TestMeasureHugeToolsList(t *testing.T) {
	mb, _ := strconv.Atoi(os.Getenv("MCPTEST_MEASURE"))
	if mb <= 0 {
		t.Skip("set MCPTEST_MEASURE to the size of the list in MB")
	}
	listBytes := strconv.Itoa(mb << 20)
	for _, tc := range []struct{ name, serve string }{
		{"stdio", "1"}, {"http-sse", mcptest.ServeHTTP}, {"http-json", mcptest.ServeHTTPJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mcpadapter.Config{Name: "big", Transport: mcpadapter.Stdio, Command: []string{os.Args[0]},
				Env: map[string]string{mcptest.EnvServe: tc.serve, mcptest.EnvListBytes: listBytes}}
			if tc.serve != "1" {
				cfg = mcpadapter.Config{Name: "big", Transport: mcpadapter.HTTP, URL: startChildHTTP(t, tc.serve, listBytes), AllowPrivateNetwork: true}
			}
			runtime.GC()
			base := heapInuse()
			peak := samplePeak(t)
			f := start(t, cfg, mcpadapter.Options{ConnectTimeout: 2 * time.Minute})
			top := peak()
			st := f.m.Status()[0]
			t.Logf("%s: %d MB tools/list: heap in use %d MB before, peak %d MB (+%d MB); state %s, %d tools; %s",
				tc.name, mb, base>>20, top>>20, (top-base)>>20, st.State, st.Tools, st.LastError)
		})
	}
}

// startChildHTTP starts this binary as an HTTP MCP server whose list is listBytes larger, and
// returns its URL.
func startChildHTTP(t *testing.T, mode, listBytes string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), mcptest.EnvServe+"="+mode, mcptest.EnvListBytes+"="+listBytes)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = in.Close() // the child exits when its input closes
		_ = cmd.Wait()
	})
	url, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(url)
}

func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// samplePeak samples the heap in use every 5 ms until the returned function is called, which
// returns the highest figure seen.
func samplePeak(t *testing.T) func() uint64 {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var top uint64
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			top = max(top, heapInuse())
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	stop := sync.OnceValue(func() uint64 {
		cancel()
		wg.Wait()
		return top
	})
	t.Cleanup(func() { stop() })
	return stop
}
