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

	"parley/internal/store"
	"parley/internal/store/internal/sqlcore"
)

// Group commit. Under load many conversations append at once, and each append is a commit of its
// own: with a handful of pooled connections the appends queue behind one another, one commit
// each. The committers instead take every append waiting when they are free and commit them
// together, as one pipelined batch in one implicit transaction: one round trip and one WAL flush
// for the lot. Nothing waits for a group to fill — a lone append goes at once — so an idle
// server's append costs what it did; a busy one's costs a share of a commit.
//
// A group is atomic, so one append that cannot be applied (its conversation's log moved on, a
// constraint refused a row) would take the others down with it. When a group fails, each of its
// appends is therefore run again on its own, and only the one at fault gets the error; the group
// wrote nothing, so nothing is written twice. If the group's commit was lost with the connection
// after PostgreSQL applied it, the rerun meets its own sequence already taken and answers
// store.ErrConflict, as an append racing another writer does, and the caller reloads.

// Group-commit limits.
const (
	// maxGroup bounds the appends in one transaction. A group's commit takes longer the more it
	// holds: at 500 conversations in step, groups of 32 gave the resolve a lower p99 than 64
	// (2.6× against 3.5× the bare commit, medians of six runs; docs/benchmarks.md) at the same
	// throughput, while 8 and 16 cost throughput.
	maxGroup = 32
	// queueDepth bounds appends waiting for a committer, in each of the two queues (urgent and
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
	done     chan error // buffered: a committer never blocks on a caller that left
}

// grouper owns the committer goroutines: started by Open, stopped by Store.Close. Appends marked
// store.Batch.Urgent (a person waits on them) queue apart and are taken first, so a decision
// is not committed behind the background work of every other conversation.
type grouper struct {
	urgent chan *appendReq
	queue  chan *appendReq
	ctx    context.Context // the groups' context, canceled by stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	closed chan struct{}
}

// startGroupCommit starts n committers on s.writePool.
func (s *Store) startGroupCommit(n int) {
	ctx, cancel := context.WithCancel(context.Background())
	g := &grouper{urgent: make(chan *appendReq, queueDepth), queue: make(chan *appendReq, queueDepth), ctx: ctx, cancel: cancel, closed: make(chan struct{})}
	s.group = g
	for range n {
		g.wg.Go(func() { s.commitLoop(g) })
	}
}

// stop ends the committers after their current group and fails what is still queued.
func (g *grouper) stop() {
	g.once.Do(func() {
		close(g.closed)
		g.wg.Wait()
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

// appendGrouped queues one append and waits for its group's outcome.
func (s *Store) appendGrouped(ctx context.Context, r *appendReq) error {
	g := s.group
	select {
	case <-g.closed:
		return errClosed
	default:
	}
	queue := g.queue
	if r.batch.Urgent {
		queue = g.urgent
	}
	select {
	case queue <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-g.closed:
		return errClosed
	}
	select {
	case err := <-r.done:
		return err
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

// commitLoop commits group after group until the grouper stops.
func (s *Store) commitLoop(g *grouper) {
	group := make([]*appendReq, 0, maxGroup)
	for {
		group = g.next(group[:0])
		if len(group) == 0 {
			return
		}
		s.commitGroup(g.ctx, group)
	}
}

// next waits for an append — taking an urgent one if any waits — and adds everything queued
// behind it to group, urgent appends first, up to maxGroup. It returns group empty when the
// grouper stops.
func (g *grouper) next(group []*appendReq) []*appendReq {
	select {
	case r := <-g.urgent:
		group = append(group, r)
	default:
		select {
		case <-g.closed:
			return group
		case r := <-g.urgent:
			group = append(group, r)
		case r := <-g.queue:
			group = append(group, r)
		}
	}
	group = drain(group, g.urgent)
	return drain(group, g.queue)
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

// commitGroup runs the appends in group that their callers still wait for and answers each.
func (s *Store) commitGroup(ctx context.Context, group []*appendReq) {
	live := group[:0:0]
	for _, r := range group {
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			live = append(live, r)
		}
	}
	switch len(live) {
	case 0:
		return
	case 1:
		// Alone, the append runs on its caller's context, exactly as without grouping.
		r := live[0]
		r.done <- s.sendAppend(r.ctx, []*appendReq{r})
		return
	}
	// One transaction touching several conversations: take their rows in one order, so two
	// groups (or two processes) never wait on each other's locks in a cycle.
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
	// Nothing of the group was written: find the append at fault by running each alone.
	s.groupFallbacks.Add(1)
	for _, r := range live {
		r.done <- s.sendAppend(r.ctx, []*appendReq{r})
	}
}

// sendAppend writes the appends as one pipelined batch, which PostgreSQL runs as a single
// implicit transaction: the sequence checks (which raise on a conflict), then the writes; an
// error anywhere rolls back all of it. Appends to distinct conversations are merged into one
// statement per table (sqlcore.PlanMerged); otherwise each append's statements run in turn.
func (s *Store) sendAppend(ctx context.Context, rs []*appendReq) error {
	var batch pgx.Batch
	if len(rs) > 1 && distinctConversations(rs) {
		n := len(rs)
		convs, afters, lasts, ats, statuses := make([]string, n), make([]int64, n), make([]int64, n), make([]time.Time, n), make([]string, n)
		writes := make([]sqlcore.Writes, n)
		for i, r := range rs {
			convs[i], afters[i], ats[i], statuses[i] = r.conv, r.afterSeq, r.now, r.batch.Status
			lasts[i] = r.afterSeq + int64(len(r.batch.Entries))
			writes[i] = sqlcore.PlanWrites(r.conv, r.afterSeq, r.now, r.batch)
		}
		batch.Queue(`SELECT parley_advance_all($1, $2, $3, $4, $5)`, convs, afters, lasts, ats, statuses)
		for _, st := range sqlcore.PlanMerged(writes) {
			batch.Queue(st.SQL, st.Args...)
		}
	} else {
		for _, r := range rs {
			last := r.afterSeq + int64(len(r.batch.Entries))
			batch.Queue(`SELECT parley_advance($1, $2, $3, $4, $5)`, r.conv, r.afterSeq, last, r.now, r.batch.Status)
			for _, st := range sqlcore.PlanBatch(r.conv, r.afterSeq, r.now, r.batch) {
				batch.Queue(st.SQL, st.Args...)
			}
		}
	}
	pool := s.pool
	if s.writePool != nil {
		pool = s.writePool
	}
	if err := pool.SendBatch(ctx, &batch).Close(); err != nil {
		if len(rs) == 1 {
			return fmt.Errorf("append to conversation %q: %w", rs[0].conv, mapErr(err))
		}
		return fmt.Errorf("append to %d conversations: %w", len(rs), mapErr(err))
	}
	return nil
}

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
