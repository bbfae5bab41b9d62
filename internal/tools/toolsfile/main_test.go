package toolsfile

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: an unclosed response body
// or an exchange that outlives its context would show up here as a transport goroutine.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
