package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"parley/internal/store"
	"parley/internal/store/internal/sqlcore"
)

// Group commit. Under load many conversations append at once, and each append is a commit of its
// own: with a handful of pooled connections the appends queue behind one another, one commit
// each. Instead, appends that wait together commit together, as one pipelined batch in one
// implicit transaction: one round trip and one WAL flush for the lot. Nothing waits for a group
// to fill — a lone append goes at once — so an idle server's append costs what it did; a busy
// one's costs a share of a commit.
//
// There are no committer goroutines. Each of the write pool's connections is a slot; an append
// that finds a slot free leads: it commits itself and whatever is queued, in its own goroutine.
// One that finds none queues and waits either for a leader to answer it or for a slot to free
// up, and then leads itself. Every queued append's caller is waiting for a slot, so nothing
// queued is left behind, and an append that meets no contention is never handed to another
// goroutine.
//
// A group is atomic, so one append that cannot be applied (its conversation's log moved on, a
// constraint refused a row) would take the others down with it. When PostgreSQL refuses a
// group, each of its appends is therefore run again on its own, and only the one at fault gets
// the error; the group wrote nothing, so nothing is written twice. When the group gets no answer
// (the connection dropped, its timeout fired) it may have committed, so nothing is rerun: every
// append gets the error, as a lone append would, and its caller reloads.

// Group-commit limits.
const (
	// maxGroup bounds the appends in one transaction. A group's commit takes longer the more it
	// holds: at 500 conversations in step, groups of 32 gave the resolve a lower p99 than 64
	// (2.6× against 3.3× the bare commit, medians of 6 and 8 runs; docs/benchmarks.md) at the same
	// throughput, while 8 and 16 cost throughput.
	maxGroup = 32
	// queueDepth bounds appends waiting for a slot, in each of the two queues (urgent and
	// the rest). A caller finding its queue full waits for room (or its context): backpressure,
	// never a dropped write.
	queueDepth = 1024
	// groupTimeout bounds a group's round trip. A group runs on the store's context, not on any
	// one caller's, since it carries the others' writes too.
	groupTimeout = 30 * time.Second
)

// errClosed answers an append made after Close, or left in the queue by it.
var errClosed = errors.New("store closed")

// Request states: a committer takes a queued request, or its caller abandons it (its context
// ended before a committer got to it); whichever comes first decides.
const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

type appendReq struct {
	ctx      context.Context
	conv     string
	afterSeq int64
	batch    store.Batch
	now      time.Time
	state    atomic.Int32
	done     chan error // buffered: a leader never blocks on a caller that left
}

// grouper queues appends for the slot holders. Appends marked store.Batch.Urgent (a person
// waits on them) queue apart and are taken first, so a decision is not committed behind the
// background work of every other conversation.
type grouper struct {
	slots  chan struct{} // one per write-pool connection; holding one is leading a group
	urgent chan *appendReq
	queue  chan *appendReq
	ctx    context.Context // the groups' context, canceled by stop
	cancel context.CancelFunc
	once   sync.Once
	closed chan struct{}

	idleLeads atomic.Int64 // slots taken that found nothing to commit (at most one per queued append)
}

func newGrouper(slots int) *grouper {
	ctx, cancel := context.WithCancel(context.Background())
	return &grouper{
		slots:  make(chan struct{}, slots),
		urgent: make(chan *appendReq, queueDepth),
		queue:  make(chan *appendReq, queueDepth),
		ctx:    ctx, cancel: cancel,
		closed: make(chan struct{}),
	}
}

// stop refuses new appends, waits for the groups in flight and fails what is still queued.
func (g *grouper) stop() {
	g.once.Do(func() {
		close(g.closed)
		for range cap(g.slots) {
			g.slots <- struct{}{}
		}
		g.cancel()
		for {
			var r *appendReq
			select {
			case r = <-g.urgent:
			case r = <-g.queue:
			default:
				return
			}
			if r.state.CompareAndSwap(reqQueued, reqTaken) {
				r.done <- errClosed
			}
		}
	})
}

// appendGrouped commits r, leading a group when a slot is free and queueing for one otherwise,
// and returns its outcome.
func (s *Store) appendGrouped(ctx context.Context, r *appendReq) error {
	g := s.group
	select {
	case <-g.closed:
		return errClosed
	default:
	}
	select {
	case g.slots <- struct{}{}:
		r.state.Store(reqTaken)
		s.lead(g, r)
		return <-r.done
	default:
	}
	queue := g.queue
	if r.batch.Urgent {
		queue = g.urgent
	}
	select {
	case queue <- r:
	case g.slots <- struct{}{}: // the queue is full (of appends whose callers left, say) but a slot freed
		r.state.Store(reqTaken)
		s.lead(g, r)
		return <-r.done
	case <-ctx.Done():
		return ctx.Err()
	case <-g.closed:
		return errClosed
	}
	select {
	case err := <-r.done:
		return err
	case g.slots <- struct{}{}:
		// Lead, with r unless another leader took it first (then lead whatever is queued, once,
		// and wait for r's answer: competing for slots again would spin while its group commits).
		var own *appendReq
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			own = r
		}
		s.lead(g, own)
		return <-r.done
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return ctx.Err()
		}
		// Taken into a group already: its outcome is the truth about the log, so wait for it.
		return <-r.done
	case <-g.closed:
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return errClosed
		}
		return <-r.done
	}
}

// lead commits one group — own (already taken; nil when another leader took it) and what is
// queued — and gives the slot back.
func (s *Store) lead(g *grouper, own *appendReq) {
	defer func() { <-g.slots }()
	group := make([]*appendReq, 0, maxGroup)
	if own != nil {
		group = append(group, own)
	}
	group = take(g.collect(group), len(group))
	if len(group) == 0 {
		g.idleLeads.Add(1)
		return
	}
	s.commitGroup(g.ctx, group)
}

// collect adds to group what is queued, urgent appends first, up to maxGroup, without waiting.
func (g *grouper) collect(group []*appendReq) []*appendReq {
	return drain(drain(group, g.urgent), g.queue)
}

// take keeps group[:taken], already this leader's, and those of the rest it takes now, dropping
// the ones whose callers gave up or that another leader took first.
func take(group []*appendReq, taken int) []*appendReq {
	live := group[:taken]
	for _, r := range group[taken:] {
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			live = append(live, r)
		}
	}
	return live
}

// drain appends what q holds to group, up to maxGroup, without waiting.
func drain(group []*appendReq, q chan *appendReq) []*appendReq {
	for len(group) < maxGroup {
		select {
		case r := <-q:
			group = append(group, r)
		default:
			return group
		}
	}
	return group
}

// commitGroup commits live, appends this leader has taken, and answers each.
func (s *Store) commitGroup(ctx context.Context, live []*appendReq) {
	switch len(live) {
	case 0:
		return
	case 1:
		// Alone, the append runs on its caller's context, exactly as without grouping.
		r := live[0]
		r.done <- s.sendAppend(r.ctx, []*appendReq{r})
		return
	}
	// In conversation order, parley_append locks their rows in one order, so two groups racing
	// for the same conversations (only several processes do) wait rather than deadlock; should
	// PostgreSQL abort one anyway, its appends are rerun one at a time below.
	slices.SortStableFunc(live, func(a, b *appendReq) int { return strings.Compare(a.conv, b.conv) })
	gctx, cancel := context.WithTimeout(ctx, groupTimeout)
	err := s.sendAppend(gctx, live)
	cancel()
	if err == nil {
		s.groupedAppends.Add(int64(len(live)))
		for _, r := range live {
			r.done <- nil
		}
		return
	}
	if _, refused := errors.AsType[*pgconn.PgError](err); !refused {
		// No answer from the server (the connection dropped, the timeout fired): the group may
		// have committed, and rerunning an append without entries, which no sequence check
		// guards, could write it twice. Each append gets the error, as a lone append would.
		for _, r := range live {
			r.done <- err
		}
		return
	}
	// PostgreSQL refused the group, so nothing of it was written: find the append at fault by
	// running each alone.
	s.groupFallbacks.Add(1)
	for _, r := range live {
		r.done <- s.sendAppend(r.ctx, []*appendReq{r})
	}
}

// sendAppend writes the appends as one pipelined batch, which PostgreSQL runs as a single
// implicit transaction: parley_append (migration 015) makes each append's sequence check (raising
// on a conflict) and writes its entries, calls and expiries; steps, grants and notifications
// follow; an error anywhere rolls back all of it. Appends to distinct conversations share one
// call and one statement per table; otherwise each append's statements run in turn. Audit
// records are linked into the chain under the store's key, which the database does not have:
// appends that write some take a second round trip (sendChained).
func (s *Store) sendAppend(ctx context.Context, rs []*appendReq) error {
	var batch pgx.Batch
	var audit [][]any // every append's audit records, linked and inserted last
	queue := func(rs []*appendReq) {
		n := len(rs)
		convs, afters, lasts, ats, statuses := make([]string, n), make([]int64, n), make([]int64, n), make([]time.Time, n), make([]string, n)
		writes := make([]sqlcore.Writes, n)
		for i, r := range rs {
			convs[i], afters[i], ats[i], statuses[i] = r.conv, r.afterSeq, r.now, r.batch.Status
			lasts[i] = r.afterSeq + int64(len(r.batch.Entries))
			writes[i] = sqlcore.PlanWrites(r.conv, r.afterSeq, r.now, r.batch)
		}
		m := sqlcore.MergeWrites(writes)
		batch.Queue(appendSQL, append([]any{s.writerID(), convs, afters, lasts, ats, statuses}, sqlcore.AppendWritesArgs(m)...)...)
		for _, st := range sqlcore.PlanMergedRest(m) {
			batch.Queue(st.SQL, st.Args...)
		}
		audit = append(audit, m.Audit...)
	}
	if len(rs) > 1 && distinctConversations(rs) {
		queue(rs)
	} else {
		for _, r := range rs {
			queue([]*appendReq{r})
		}
	}
	pool := s.pool
	if s.writePool != nil {
		pool = s.writePool
	}
	var err error
	if len(audit) == 0 {
		err = pool.SendBatch(ctx, &batch).Close()
	} else {
		var seq int64
		var head string
		if seq, head, err = s.sendChained(ctx, pool, &batch, audit); err == nil {
			s.Anchored(seq, head, s.Stamp())
		}
	}
	if err != nil {
		if len(rs) == 1 {
			return fmt.Errorf("append to conversation %q: %w", rs[0].conv, mapErr(err))
		}
		return fmt.Errorf("append to %d conversations: %w", len(rs), mapErr(err))
	}
	return nil
}

// sendChained commits batch and the audit rows (sqlcore.Writes.Audit's) in one transaction of
// two round trips: the first opens it, makes batch's writes, takes the chain's lock and reads the
// chain's head; the rows are linked here, under the key, and the second inserts them and
// commits. The lock is held from the first round trip's end to the commit, the one window in
// which the chain's writers wait for each other. It returns the new head.
func (s *Store) sendChained(ctx context.Context, pool *pgxpool.Pool, batch *pgx.Batch, audit [][]any) (seq int64, head string, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, "", err
	}
	// A connection released inside a transaction (an error below) is closed, not reused: the
	// server rolls the transaction back.
	defer conn.Release()
	defer func() {
		if err != nil && !conn.Conn().IsClosed() && conn.Conn().PgConn().TxStatus() != 'I' {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = conn.Exec(rctx, "ROLLBACK")
			cancel()
		}
	}()
	first := &pgx.Batch{}
	first.Queue("BEGIN")
	first.QueuedQueries = append(first.QueuedQueries, batch.QueuedQueries...)
	first.Queue(sqlcore.ChainLockPG)
	first.Queue(sqlcore.AuditHeadSQL)
	br := conn.SendBatch(ctx, first)
	for range len(first.QueuedQueries) - 1 {
		if _, err = br.Exec(); err != nil {
			_ = br.Close()
			return 0, "", err
		}
	}
	if err = br.QueryRow().Scan(&seq, &head); errors.Is(err, pgx.ErrNoRows) {
		err = nil // an empty chain
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, "", err
	}
	chained, seq, head := sqlcore.ChainAuditRows(s.ChainKey, seq, head, audit)
	second := &pgx.Batch{}
	second.Queue(sqlcore.AuditInsertUnnest, sqlcore.Columns(chained, len(sqlcore.AuditChainedTypes))...)
	second.Queue("COMMIT")
	br = conn.SendBatch(ctx, second)
	_, err = br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && tag.String() != "COMMIT" {
		err = fmt.Errorf("the transaction was not committed (%s)", tag.String())
	}
	if err != nil {
		return 0, "", err
	}
	return seq, head, nil
}

// appendSQL calls parley_append (migrations 015, 016): the writer (Store.SetWriter) and the
// appends' sequence checks, then the columns of their entries, calls and expiries
// (sqlcore.AppendWritesArgs).
var appendSQL = func() string {
	var b strings.Builder
	b.WriteString(`SELECT parley_append($1::text, $2::text[], $3::bigint[], $4::bigint[], $5::timestamptz[], $6::text[]`)
	for i, t := range sqlcore.AppendWritesTypes() {
		fmt.Fprintf(&b, ", $%d::%s", i+7, t)
	}
	b.WriteString(")")
	return b.String()
}()

func distinctConversations(rs []*appendReq) bool {
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		if seen[r.conv] {
			return false
		}
		seen[r.conv] = true
	}
	return true
}
