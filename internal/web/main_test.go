package web

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a server goroutine behind (an event stream, a
// socket writer, a subscription pump). Test clients' idle keep-alive connections are not the
// server's and are ignored. It then drops the package's migrated template database.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.Cleanup(func(int) {
			if err := pgMigrated.Drop(); err != nil {
				fmt.Fprintln(os.Stderr, "drop the migrated template database:", err)
			}
		}),
	)
}
