// Package migrations holds PostgreSQL's schema as numbered SQL files (NNN_name.up.sql),
// embedded in the binary and applied in order by pgstore.Migrate (`web migrate` and start-up).
// The embedded SQLite store keeps its twin in internal/store/sqlitestore/schema.sql.
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.up.sql
var FS embed.FS
