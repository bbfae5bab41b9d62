package web

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a server goroutine behind (an event stream, a
// socket writer, a subscription pump). Test clients' idle keep-alive connections are not the
// server's and are ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}
