//go:build pprof

// Profiling for the benchmark harness only (go build -tags pprof): with PARLEY_PPROF_ADDR set,
// the binary also serves net/http/pprof on that address, plus /debug/cpu/start?path=FILE and
// /debug/cpu/stop to profile one phase of a load run exactly. Never in the normal build.
package main

import (
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof/ on http.DefaultServeMux
	"os"
	"runtime/pprof"
	"sync"
)

func init() {
	addr := os.Getenv("PARLEY_PPROF_ADDR")
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pprof:", err)
		os.Exit(1)
	}
	var (
		mu  sync.Mutex
		out *os.File
	)
	http.HandleFunc("/debug/cpu/start", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if out != nil {
			http.Error(w, "already profiling", http.StatusConflict)
			return
		}
		f, err := os.Create(r.URL.Query().Get("path"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		out = f
	})
	http.HandleFunc("/debug/cpu/stop", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if out == nil {
			http.Error(w, "not profiling", http.StatusConflict)
			return
		}
		pprof.StopCPUProfile()
		if err := out.Close(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
		out = nil
	})
	fmt.Fprintln(os.Stderr, "pprof listening on", ln.Addr())
	// The listener lives as long as the process; the server is the process's, stopped by exit.
	go func() { _ = http.Serve(ln, nil) }()
}
