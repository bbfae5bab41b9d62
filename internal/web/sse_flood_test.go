package web

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"parley/internal/store"
)

// TestEventsCatchUpFlood measures the process under 32 slow readers catching up on a ~10 MB log
// (docs/benchmarks.md, "Event stream catch-up"): each reader reads the first event and then
// stops reading, so its stream's writes block with the catch-up under way. It logs the peak heap
// in use and the process's peak resident set while they hang. A measurement, not a check: it
// runs only with PARLEY_SSE_FLOOD=1.
//
//	PARLEY_SSE_FLOOD=1 go test -count=1 -run TestEventsCatchUpFlood -v ./internal/web/
func TestEventsCatchUpFlood(t *testing.T) {
	if os.Getenv("PARLEY_SSE_FLOOD") == "" {
		t.Skip("a measurement: PARLEY_SSE_FLOOD=1 runs it")
	}
	e := newTestEnv(t, openSQLite, Config{SSEHeartbeat: time.Minute, MaxConnsPerUser: 64, APIBurst: 1000})
	owner := e.user("owner", store.RoleMember)
	conv := e.conversation(owner)
	const entries, size, readers = 160, 64 << 10, 32 // 10 MB of text
	text := strings.Repeat("lorem ipsum ", size/12)
	ctx := context.Background()
	for i := range entries {
		data, _ := json.Marshal(map[string]string{"text": text})
		if _, err := e.st.Append(ctx, conv.ID, int64(i), store.Batch{Entries: []store.Entry{
			{Type: store.EntryUserMessage, Actor: owner.ID, Data: data}}}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	base := procRSS(t)
	tok := e.token(owner)
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range readers {
		req, _ := http.NewRequest("GET", e.ts.URL+"/api/v1/conversations/"+conv.ID+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 {
			t.Fatalf("stream: %d", res.StatusCode)
		}
		wg.Add(1)
		go func() { // read one entry, then hang until released
			defer wg.Done()
			defer res.Body.Close()
			r := bufio.NewReader(res.Body)
			for {
				line, err := r.ReadString('\n')
				if err != nil || strings.HasPrefix(line, "id: ") {
					break
				}
			}
			<-release
		}()
	}
	var peakHeap uint64
	var peakRSS int64
	var ms runtime.MemStats
	for range 300 { // 3 s of samples while the readers hang
		runtime.ReadMemStats(&ms)
		peakHeap = max(peakHeap, ms.HeapInuse)
		peakRSS = max(peakRSS, procRSS(t))
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	t.Logf("%d readers of a %.1f MB log: peak heap in use %.0f MB, peak RSS %.0f MB (%.0f MB before the readers)",
		readers, float64(entries*size)/1e6, float64(peakHeap)/1e6, float64(peakRSS)/1e6, float64(base)/1e6)
}

// procRSS is the process's resident set in bytes (Linux), from /proc/self/status.
func procRSS(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
