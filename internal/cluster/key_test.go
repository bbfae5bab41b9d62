package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"parley/internal/agent"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
)

// forge seals plain as a node holding key would.
func forge(t *testing.T, key, plain []byte) string {
	t.Helper()
	k, err := newKeyring(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	return (&Node{keys: k}).seal(plain)
}

// recorder is an Inbound that records the bodies of the requests it serves.
type recorder struct {
	mu     sync.Mutex
	bodies []string
}

func (r *recorder) inbound() agent.Inbound {
	return agent.Inbound{Forward: func(_ context.Context, body []byte) []byte {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.bodies = append(r.bodies, string(body))
		return []byte(`{"posted":{}}`)
	}}
}

func (r *recorder) served(marker string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, b := range r.bodies {
		if strings.Contains(b, marker) {
			n++
		}
	}
	return n
}

// settle sends a sealed request marked sentinel from a to b and waits until b served it: what
// was notified on b's channel before it has been heard (PostgreSQL delivers in commit order),
// and a moment more lets the goroutines serving it finish.
func settle(t *testing.T, a, b *Node, rec *recorder, sentinel string) {
	t.Helper()
	body := json.RawMessage(fmt.Sprintf(`{"conv":"c","kind":0,"text":%q}`, sentinel))
	if err := a.notify(context.Background(), nodeChannel(b.id), message{T: "req", ID: 999, Body: body}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { return rec.served(sentinel) == 1 }, 5*time.Second) {
		t.Fatalf("the sentinel %s was not served", sentinel)
	}
	time.Sleep(200 * time.Millisecond)
}

// candidates are the 32-byte keys a role might find in what it reads: raw bytes, and text
// in hex or base64.
func candidates(v any) [][]byte {
	var raw []byte
	switch x := v.(type) {
	case []byte:
		raw = x
	case string:
		raw = []byte(x)
	default:
		return nil
	}
	var out [][]byte
	add := func(b []byte) {
		if len(b) == 32 {
			out = append(out, b)
		}
	}
	add(raw)
	s := strings.TrimSpace(string(raw))
	if b, err := hex.DecodeString(s); err == nil {
		add(b)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			add(b)
		}
	}
	return out
}

// A role granted SELECT on every table of the database — a read replica's user, a reporting
// tool, a leaked read-only password — reads them all, and LISTEN and NOTIFY need nothing
// more: it finds no key that seals a request the owner serves (found by an attack: it read
// the key from cluster_secret and sealed a forwarded approval as two reviewers).
func TestSelectOnlyRoleCannotForgeARequest(t *testing.T) {
	a, b, cleanup := twoNodes(t)
	defer cleanup()
	rec := &recorder{}
	b.Serve(rec.inbound())
	ctx := context.Background()
	// Something in every cluster table: a large request leaves its body in cluster_mail.
	big := json.RawMessage(fmt.Sprintf(`{"conv":"c","kind":0,"text":%q}`, "large "+strings.Repeat("x", 2*maxPayload)))
	if _, err := a.payload(ctx, nodeChannel(b.id), message{T: "req", ID: 1, Body: big}); err != nil {
		t.Fatal(err)
	}

	role := fmt.Sprintf("reader_%d", time.Now().UnixNano())
	for _, q := range []string{`CREATE ROLE ` + role + ` LOGIN`, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO ` + role} {
		if _, err := a.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		_, _ = a.pool.Exec(ctx, `DROP OWNED BY `+role)
		_, _ = a.pool.Exec(ctx, `DROP ROLE IF EXISTS `+role)
	}()
	cfg := a.pool.Config().ConnConfig.Copy()
	cfg.User = role
	reader, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	rows, err := reader.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) < 10 {
		t.Fatalf("tables: %v %v", tables, err)
	}
	var keys [][]byte
	for _, table := range tables {
		rows, err := reader.Query(ctx, `SELECT * FROM `+pgx.Identifier{table}.Sanitize())
		if err != nil {
			t.Fatalf("the reader cannot read %s: %v", table, err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatalf("read %s: %v", table, err)
			}
			for _, v := range vals {
				keys = append(keys, candidates(v)...)
			}
			for _, v := range vals {
				if b, ok := v.([]byte); ok && bytes.Contains(b, []byte("large xxxx")) {
					t.Errorf("the reader reads a forwarded request in clear in %s", table)
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("the reader cannot read %s: %v", table, err)
		}
	}
	t.Logf("the reader read %d tables and tried %d candidate keys", len(tables), len(keys))

	ch := nodeChannel(b.id)
	forged := func(n uint64) []byte {
		body := json.RawMessage(`{"conv":"c","kind":1,"by":{"UserID":"rita","Role":"reviewer","Via":"token"},"call_id":"n1","res":{"decision":"approve"},"text":"forged"}`)
		plain, _ := json.Marshal(message{T: "req", From: "0000000000000bad", N: n, ID: n, Body: body, Ch: ch, At: time.Now().UnixMilli()})
		return plain
	}
	for i, k := range keys {
		if _, err := reader.Exec(ctx, `SELECT pg_notify($1, $2)`, ch, forge(t, k, forged(uint64(1_000_000+i)))); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, a, b, rec, "sentinel")
	if n := rec.served("forged"); n != 0 {
		t.Fatalf("a role with SELECT only forged %d forwarded requests that the owner served", n)
	}
	// The same forgery sealed with the cluster's own key is served: the test's forgeries are
	// what the owner would take, had the role found the key.
	if _, err := reader.Exec(ctx, `SELECT pg_notify($1, $2)`, ch, a.seal(forged(2_000_000))); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { return rec.served("forged") == 1 }, 5*time.Second) {
		t.Fatal("a request sealed with the cluster's key was not served: the forgeries prove nothing")
	}
}

// A large request's body waits in cluster_mail, sealed and bound to its notification: a row
// moved to another notification (two requests' bodies swapped) or rewritten in clear is
// refused, and no row holds a body in clear (found by a review: the rows were plain text, and
// whoever could write the table swapped one approval's body for another's).
func TestTamperedMailIsRefused(t *testing.T) {
	a, b, cleanup := twoNodes(t)
	defer cleanup()
	rec := &recorder{}
	b.Serve(rec.inbound())
	ctx := context.Background()
	ch := nodeChannel(b.id)
	big := func(marker string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"conv":"c","kind":0,"text":%q}`, marker+" "+strings.Repeat("x", 2*maxPayload)))
	}
	mailOf := func(payload string) int64 {
		plain, err := a.open(payload)
		if err != nil {
			t.Fatal(err)
		}
		var m message
		if err := json.Unmarshal(plain, &m); err != nil || m.Mail == 0 {
			t.Fatalf("not through the mail: %v %s", err, plain)
		}
		return m.Mail
	}
	send := func(payload string) {
		if _, err := a.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, ch, payload); err != nil {
			t.Fatal(err)
		}
	}
	first, err := a.payload(ctx, ch, message{T: "req", ID: 1, Body: big("first")})
	if err != nil {
		t.Fatal(err)
	}
	second, err := a.payload(ctx, ch, message{T: "req", ID: 2, Body: big("second")})
	if err != nil {
		t.Fatal(err)
	}
	third, err := a.payload(ctx, ch, message{T: "req", ID: 3, Body: big("third")})
	if err != nil {
		t.Fatal(err)
	}
	var clear int
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM cluster_mail WHERE position('xxxxxxxx'::bytea IN body) > 0`).Scan(&clear); err != nil || clear != 0 {
		t.Errorf("%d mail rows hold their body in clear (%v)", clear, err)
	}
	// first's row gets second's body; third's row a body in clear.
	if _, err := a.pool.Exec(ctx, `UPDATE cluster_mail SET body = (SELECT body FROM cluster_mail WHERE id = $2) WHERE id = $1`, mailOf(first), mailOf(second)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.pool.Exec(ctx, `UPDATE cluster_mail SET body = $2 WHERE id = $1`, mailOf(third), []byte(big("rewritten"))); err != nil {
		t.Fatal(err)
	}
	send(first)
	send(third)
	settle(t, a, b, rec, "sentinel")
	if n := rec.served("second"); n != 0 {
		t.Errorf("second's body, moved under first's notification, was served %d times", n)
	}
	if n := rec.served("rewritten"); n != 0 {
		t.Errorf("a body rewritten in clear was served %d times", n)
	}
	// Untouched, second's own notification and body are served.
	send(second)
	if !waitFor(func() bool { return rec.served("second") == 1 }, 5*time.Second) {
		t.Fatal("an untouched large request was not served")
	}
}

// A key is rotated without a pause in three rolls of the processes: (old, previous new), then
// (new, previous old), then (new). Each step's processes open what the others seal, small
// notifications and mail alike; a process with the new key alone refuses the old's.
func TestKeyRotation(t *testing.T) {
	old, next := NewKey(), NewKey()
	ring := func(cur, prev []byte) *keyring {
		k, err := newKeyring(cur, prev)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	steps := []*keyring{ring(old, nil), ring(old, next), ring(next, old), ring(next, nil)}
	msg := message{T: "req", From: "a", N: 7, Ch: nodeChannel("b")}
	for i, sender := range steps {
		for j, receiver := range steps {
			if j < i-1 || j > i+1 {
				continue // never running together
			}
			if _, err := receiver.open(sender.seal([]byte("hi"), []byte(noteAD)), []byte(noteAD)); err != nil {
				t.Errorf("step %d's notification refused by step %d: %v", i, j, err)
			}
			if _, err := receiver.open(sender.seal([]byte("body"), mailBinding(msg)), mailBinding(msg)); err != nil {
				t.Errorf("step %d's mail refused by step %d: %v", i, j, err)
			}
		}
	}
	if _, err := steps[3].open(steps[0].seal([]byte("hi"), []byte(noteAD)), []byte(noteAD)); err == nil {
		t.Error("the new key alone opened what the old sealed")
	}
	other := msg
	other.N++
	if _, err := steps[0].open(steps[0].seal([]byte("body"), mailBinding(msg)), mailBinding(other)); err == nil {
		t.Error("a mail body opened for another notification")
	}
	if _, err := steps[0].open(steps[0].seal([]byte("body"), mailBinding(msg)), []byte(noteAD)); err == nil {
		t.Error("a mail body opened as a notification")
	}

	// End to end: a seals with the old key; b, rotated, opens with its previous one — a small
	// request and a large one through the mail.
	a, b, cleanup := twoNodesKeyed(t, Config{Key: old}, Config{Key: next, PreviousKey: old})
	defer cleanup()
	rec := &recorder{}
	b.Serve(rec.inbound())
	ctx := context.Background()
	if err := a.notify(ctx, nodeChannel(b.id), message{T: "req", ID: 1, Body: json.RawMessage(`{"text":"small"}`)}); err != nil {
		t.Fatal(err)
	}
	large := json.RawMessage(fmt.Sprintf(`{"text":%q}`, "large "+strings.Repeat("x", 2*maxPayload)))
	if err := a.notify(ctx, nodeChannel(b.id), message{T: "req", ID: 2, Body: large}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { return rec.served("small") == 1 && rec.served("large") == 1 }, 5*time.Second) {
		t.Fatalf("b, rotated, served small %d and large %d requests sealed with its previous key, want 1 and 1", rec.served("small"), rec.served("large"))
	}
}

// A key is read from base64 or hex; anything else, or another length, is refused without
// repeating the text.
func TestParseKey(t *testing.T) {
	k := NewKey()
	for _, s := range []string{base64.StdEncoding.EncodeToString(k), base64.RawURLEncoding.EncodeToString(k), hex.EncodeToString(k), " " + base64.StdEncoding.EncodeToString(k) + "\n"} {
		got, err := ParseKey(s)
		if err != nil || !bytes.Equal(got, k) {
			t.Errorf("ParseKey(%q) = %x, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "hunter2", base64.StdEncoding.EncodeToString(k[:16]), hex.EncodeToString(k)[:40]} {
		if _, err := ParseKey(s); err == nil || (s != "" && strings.Contains(err.Error(), s)) {
			t.Errorf("ParseKey(%q): %v", s, err)
		}
	}
	if _, err := newKeyring(nil, nil); err == nil {
		t.Error("a node without a key")
	}
	if err := New(Config{}).Start(context.Background()); err == nil {
		t.Error("a node without a key started")
	}
}

// lockedLog is a logger's output, read while the node writes it.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Two processes that each made a key of their own (development, no PARLEY_CLUSTER_KEY) cannot
// hear each other, and say so as errors: the one that starts second at once, the first when it
// hears the second's notifications.
func TestOwnKeysSaySoAmongOthers(t *testing.T) {
	st, err := pgstore.Open(context.Background(), pgtest.NewURL(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var logs [2]lockedLog
	var nodes [2]*Node
	for i := range nodes {
		nodes[i] = New(Config{Pool: st.Pool(), TTL: 1500 * time.Millisecond, Key: NewKey(), OwnKey: true,
			Logger: slog.New(slog.NewTextHandler(&logs[i], nil))})
		if err := nodes[i].Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = nodes[i].Leave(context.Background()) }()
	}
	if s := logs[1].String(); !strings.Contains(s, "level=ERROR") || !strings.Contains(s, "has no cluster key configured (PARLEY_CLUSTER_KEY)") {
		t.Errorf("the second process, with a key of its own among others, said:\n%s", s)
	}
	if !waitFor(func() bool { return strings.Contains(logs[0].String(), "not sealed with this process's own key") }, 5*time.Second) {
		t.Errorf("the first process, hearing the second, said:\n%s", logs[0].String())
	}
}
