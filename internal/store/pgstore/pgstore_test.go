package pgstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/internal/sqlcore"
	"parley/internal/store/pgtest"
	"parley/internal/store/storetest"
	"parley/migrations"
)

func TestRedact(t *testing.T) {
	cases := []struct{ in, want string }{
		{"postgres://alice:s3cret@db.example:6543/parley?sslmode=disable", `host db.example:6543 database "parley" as alice`},
		{"postgres://127.0.0.1/app", `host 127.0.0.1:5432 database "app"`},
		{"host=db.example port=5433 dbname=parley user=bob password=s3cret", `host db.example:5433 database "parley" as bob`},
		{"postgres://bob:s3cret@db.example:notaport/x", "(unparseable database URL)"},
		{"::::", "(unparseable database URL)"},
	}
	for _, tc := range cases {
		got := Redact(tc.in)
		if strings.Contains(got, "s3cret") {
			t.Errorf("Redact(%q) leaks the password: %q", tc.in, got)
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("Redact(%q) = %q, want it to contain %q", tc.in, got, tc.want)
		}
	}
}

func TestOpenUnreachableFailsFastWithoutPassword(t *testing.T) {
	// A closed port on loopback refuses at once; a blackholed address is bounded by ConnectTimeout.
	start := time.Now()
	_, err := Open(t.Context(), "postgres://parley:hunter2@127.0.0.1:1/parleydb?sslmode=disable", nil)
	if err == nil {
		t.Fatal("Open of an unreachable server succeeded")
	}
	if d := time.Since(start); d > ConnectTimeout+2*time.Second {
		t.Fatalf("Open took %v to fail, want at most about %v", d, ConnectTimeout)
	}
	msg := err.Error()
	for _, want := range []string{"127.0.0.1:1", `"parleydb"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
	if strings.Contains(msg, "hunter2") {
		t.Fatalf("error leaks the password: %q", msg)
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
}

func TestMigrateConcurrentlyOnce(t *testing.T) {
	url := pgtest.NewURL(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			s, err := Open(t.Context(), url, nil)
			if err == nil {
				s.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open: %v", err)
		}
	}
	if err := Migrate(t.Context(), url); err != nil {
		t.Fatalf("Migrate of an up-to-date database: %v", err)
	}
	conn := connectT(t, url)
	var n, distinct int
	if err := conn.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT version) FROM schema_migrations`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if n != len(ms) || distinct != len(ms) {
		t.Fatalf("schema_migrations has %d rows (%d versions), want %d: a migration ran twice or not at all", n, distinct, len(ms))
	}
}

func TestMigrateAppliesOnlyNewer(t *testing.T) {
	url := pgtest.NewURL(t)
	pool, err := connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	v1 := []migrations.Migration{{Version: 1, Name: "001_a.up.sql", SQL: "CREATE TABLE a (x int)"}}
	v2 := append(v1, migrations.Migration{Version: 2, Name: "002_b.up.sql", SQL: "INSERT INTO a VALUES (1); CREATE TABLE b (y int)"})
	for _, ms := range [][]migrations.Migration{v1, v2, v2} {
		if err := applyMigrations(t.Context(), pool, ms, nil); err != nil {
			t.Fatal(err)
		}
	}
	var rows int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM a`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("migration 2 ran %d times (err %v), want once", rows, err)
	}
	// A failing migration leaves nothing and no version.
	bad := append(v2, migrations.Migration{Version: 3, Name: "003_bad.up.sql", SQL: "CREATE TABLE c (z int); SELECT no_such_function()"})
	if err := applyMigrations(t.Context(), pool, bad, nil); err == nil || !strings.Contains(err.Error(), "003_bad.up.sql") {
		t.Fatalf("failing migration: err = %v, want one naming 003_bad.up.sql", err)
	}
	var exists bool
	if err := pool.QueryRow(t.Context(), `SELECT to_regclass('c') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("a failed migration left table c (exists=%v, err=%v)", exists, err)
	}
	// The database now claims a version newer than what v1 knows.
	err = applyMigrations(t.Context(), pool, v1, nil)
	if !errors.Is(err, store.ErrSchemaTooNew) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("older binary: err = %v, want ErrSchemaTooNew naming version 2", err)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	url := pgtest.NewURL(t)
	s, err := Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	conn := connectT(t, url)
	if _, err := conn.Exec(t.Context(), `INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.up.sql')`); err != nil {
		t.Fatal(err)
	}
	_, err = Open(t.Context(), url, nil)
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Open of a newer database: err = %v, want ErrSchemaTooNew", err)
	}
	if !strings.Contains(err.Error(), "9999") {
		t.Errorf("error %q does not say which version the database is at", err)
	}
}

// sqlRecorder is a pgx tracer that keeps the statements a store runs, so a test can EXPLAIN
// exactly those.
type sqlRecorder struct {
	mu    sync.Mutex
	stmts []pgx.TraceQueryStartData
}

func (r *sqlRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stmts = append(r.stmts, d)
	return ctx
}

func (r *sqlRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// last returns the newest recorded statement that contains substr.
func (r *sqlRecorder) last(t *testing.T, substr string) pgx.TraceQueryStartData {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.stmts) - 1; i >= 0; i-- {
		if strings.Contains(r.stmts[i].SQL, substr) {
			return r.stmts[i]
		}
	}
	t.Fatalf("no statement containing %q was run", substr)
	return pgx.TraceQueryStartData{}
}

// TestHotQueriesUseTheirIndexes checks, on tables big enough that a scan would lose, that the
// statements the store really runs (recorded, then EXPLAINed with the same arguments) for the
// reviewer inbox, start-up revival and the expiry poller use their indexes.
func TestHotQueriesUseTheirIndexes(t *testing.T) {
	url := pgtest.NewURL(t)
	migrated, err := Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	migrated.Close()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	rec := &sqlRecorder{}
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := &Store{Core: sqlcore.Core{DB: &db{pool: pool}, Dialect: sqlcore.Dialect{SkipLocked: "FOR UPDATE SKIP LOCKED", ChainLock: sqlcore.ChainLockPG}, Clock: clock.Real{}, ChainKey: store.RandomAuditKey()}, pool: pool}

	conn := connectT(t, url)
	if _, err := conn.Exec(t.Context(), `
		INSERT INTO conversations SELECT 'c'||i, 'u', 't', CASE WHEN i % 100 = 0 THEN 'awaiting' ELSE 'idle' END, 0, now(), now()
			FROM generate_series(1, 20000) i;
		INSERT INTO tool_calls SELECT 'c'||(i % 200 + 1), 'call'||i, 'n', 'server', 'never', '', CASE WHEN i % 100 = 0 THEN 'awaiting' ELSE 'resolved' END,
			CASE WHEN i % 100 = 0 THEN 'approval' ELSE '' END, NULL, NULL, NULL, NULL, i, now(), now() FROM generate_series(1, 20000) i;
		INSERT INTO expiries SELECT 'c'||(i % 200 + 1), 'call'||i, '2030-01-01'::timestamptz + i * interval '1 minute', NULL
			FROM generate_series(1, 20000) i;
		ANALYZE conversations; ANALYZE tool_calls; ANALYZE expiries`); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if cs, err := s.ListActive(ctx); err != nil || len(cs) != 200 {
		t.Fatalf("ListActive = %d rows, %v; want 200", len(cs), err)
	}
	if ps, err := s.ListPending(ctx, store.PendingFilter{Kind: "approval", Limit: 50}); err != nil || len(ps) != 50 {
		t.Fatalf("ListPending = %d rows, %v; want 50", len(ps), err)
	}
	due := time.Date(2030, 1, 1, 0, 10, 0, 0, time.UTC)
	if es, err := s.ClaimDueExpiries(ctx, due, time.Minute, 100); err != nil || len(es) != 10 {
		t.Fatalf("ClaimDueExpiries = %d, %v; want 10", len(es), err)
	}
	for _, tc := range []struct{ what, sql, index string }{
		{"ListActive", "FROM conversations WHERE status", "conversations_active"},
		{"ListPending", "FROM tool_calls tc JOIN conversations", "tool_calls_pending"},
		{"ClaimDueExpiries", "UPDATE expiries SET claimed_until", "expiries_due"},
	} {
		st := rec.last(t, tc.sql)
		rows, err := conn.Query(ctx, "EXPLAIN "+st.SQL, st.Args...)
		if err != nil {
			t.Fatalf("%s: EXPLAIN: %v", tc.what, err)
		}
		var plan strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan.String(), tc.index) {
			t.Errorf("%s's plan does not use %s:\n%s", tc.what, tc.index, plan.String())
		}
	}
}

func connectT(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestWithClockStampsAndExpires(t *testing.T) {
	ctx := t.Context()
	t0 := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	s, err := Open(ctx, pgtest.NewURL(t), nil, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.CheckClock(t, s, clk, t0)
}

// TestReadyNamesSchemaDrift checks that store.Ready (the /readyz check) reports a database
// that another binary moved on, or that lost its migrations, while this process runs.
func TestReadyNamesSchemaDrift(t *testing.T) {
	url := pgtest.NewURL(t)
	s, err := Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn := connectT(t, url)
	steps := []struct {
		sql  string
		want error
	}{
		{``, nil},
		{`INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.up.sql')`, store.ErrSchemaTooNew},
		{`DELETE FROM schema_migrations`, store.ErrSchemaBehind},
		{`DROP TABLE schema_migrations`, store.ErrSchemaBehind},
	}
	for _, st := range steps {
		if st.sql != "" {
			if _, err := conn.Exec(t.Context(), st.sql); err != nil {
				t.Fatal(err)
			}
		}
		err := store.Ready(t.Context(), s)
		if st.want == nil && err != nil || st.want != nil && !errors.Is(err, st.want) {
			t.Fatalf("after %q: Ready = %v, want %v", st.sql, err, st.want)
		}
	}
}

// TestMigration014WaitsForRunningAppends: migration 014 locks the log tables while a binary from
// before it may still be appending (conversations first, then entries). An append transaction
// held open past the migration's lock_timeout makes it give way, and it is tried again, and
// applied, once the append commits — no deadlock, and no failed start.
func TestMigration014WaitsForRunningAppends(t *testing.T) {
	url := pgtest.NewURL(t)
	pool, err := connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m migrations.Migration) bool { return m.Version == 14 })
	if i < 0 {
		t.Fatal("no migration 14")
	}
	if err := applyMigrations(t.Context(), pool, ms[:i], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO users (id, name, role, created_at) VALUES ('u', 'u', 'member', now());
		INSERT INTO conversations (id, owner_id, title, status, last_seq, created_at, updated_at) VALUES ('c', 'u', '', 'idle', 0, now(), now())`); err != nil {
		t.Fatal(err)
	}
	// An older binary's append in flight: its sequence check holds the conversation's row, its
	// entry the entries table, until it commits 5.5 s later (past the migration's 5 s wait).
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `UPDATE conversations SET last_seq = 1 WHERE id = 'c'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `INSERT INTO entries (conversation_id, seq, type, tool_call_id, actor, data, created_at) VALUES ('c', 1, 'user_message', '', 'u', '{"text":"hi"}', now())`); err != nil {
		t.Fatal(err)
	}
	committed := make(chan error, 1)
	go func() {
		time.Sleep(5500 * time.Millisecond)
		committed <- tx.Commit(context.Background())
	}()
	if err := applyMigrations(t.Context(), pool, ms, nil); err != nil {
		t.Fatalf("migrating past 014 beside an open append: %v", err)
	}
	if err := <-committed; err != nil {
		t.Fatalf("the append that was in flight: %v", err)
	}
	var version, entries int
	if err := pool.QueryRow(t.Context(), `SELECT max(version), (SELECT count(*) FROM entries) FROM schema_migrations`).Scan(&version, &entries); err != nil {
		t.Fatal(err)
	}
	if version != ms[len(ms)-1].Version || entries != 1 {
		t.Fatalf("version %d, %d entries; want %d and the append's one entry", version, entries, ms[len(ms)-1].Version)
	}
}

// TestMigration019KeepsOldGrantsForAnyArguments: grants written before migration 019 covered any
// arguments and still do after it, and a binary from before it (an insert without the new
// columns, during a rolling upgrade) still writes one; this binary's exact grants cover their
// arguments only.
func TestMigration019KeepsOldGrantsForAnyArguments(t *testing.T) {
	url := pgtest.NewURL(t)
	pool, err := connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	all, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(m migrations.Migration) bool { return m.Version >= 19 })
	if i < 0 || all[i].Version != 19 {
		t.Fatalf("no migration 019 among %d", len(all))
	}
	if err := applyMigrations(t.Context(), pool, all[:i], nil); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	oldInsert := `INSERT INTO grants (id, user_id, tool, scope, conversation_id, tool_call_id, created_by, created_at, expires_at)
		VALUES ($1, 'u1', 'pay', 'user', 'c1', 'x', 'u1', $2, $3)`
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO users (id, name, role, created_at) VALUES ('u1', 'ana', 'member', now())`, nil},
		{oldInsert, []any{"g-before", now, now.Add(time.Hour)}},
	} {
		if _, err := pool.Exec(t.Context(), q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	if err := applyMigrations(t.Context(), pool, all, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), oldInsert, "g-rolling", now.Add(time.Second), now.Add(time.Hour)); err != nil {
		t.Fatalf("an old binary's grant during the upgrade: %v", err)
	}
	s, err := Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list, err := s.ListGrants(t.Context(), "u1", now)
	if err != nil || len(list) != 2 {
		t.Fatalf("grants after the migration: %v %+v", err, list)
	}
	for _, g := range list {
		if g.ArgsScope != store.GrantArgsAny || g.ArgsHash != "" {
			t.Errorf("grant %s after the migration: %+v, want any arguments", g.ID, g)
		}
	}
	if g, err := s.ActiveGrant(t.Context(), "u1", "c9", "pay", "whatever", now.Add(2*time.Second)); err != nil || g.ID != "g-rolling" {
		t.Fatalf("an old grant covers any arguments: %v %+v", err, g)
	}
}

// TestSearchTimeout: a search past its statement timeout is stopped by PostgreSQL (SET LOCAL
// statement_timeout) and answered store.ErrSearchTimeout.
func TestSearchTimeout(t *testing.T) {
	s, err := Open(t.Context(), pgtest.NewURL(t), nil, WithSearchTimeout(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	storetest.SearchTimeout(t, s)
}
