// Command web is Parley's one binary.
package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	addr := os.Getenv("PARLEY_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	fmt.Printf("parley listening on http://%s\n", addr)
	if err := http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "Parley")
	})); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
