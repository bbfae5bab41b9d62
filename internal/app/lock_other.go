//go:build !unix

package app

// lockDataDir does not lock where flock is missing: run one process per data directory.
func lockDataDir(string) (func(), error) { return func() {}, nil }
