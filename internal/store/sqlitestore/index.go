package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"parley/internal/clock"
)

// Search indexing runs outside the appends' transactions (migrations/sqlite/017): an
// append only moves its conversation's last_seq past indexed_seq, in the row it updates anyway;
// the messages logged in between are copied into message_text (and by its trigger into the FTS5
// index) later, many per transaction:
//
//   - by a search, which first indexes its owner's pending conversations up to their logs as
//     they were when it looked (read-your-writes: every append that returned before the search
//     began is found), and
//   - by the background indexer, which indexes the conversations appended to indexDelay after
//     the append, so that a search rarely finds much to do.
//
// indexed_seq moves in the same transaction as the rows it covers, so a crash loses nothing:
// what was pending stays pending, and the indexer looks through every conversation once on
// Open. A deleted conversation takes its row, its entries and its pending work with it; a
// conversation created again under the same id starts at indexed_seq 0.
//
// Nothing else is written in the append: no queue row, no index entry (a partial index of the
// pending conversations cost an append one more page in the WAL, ~0.1 of a bare commit,
// docs/benchmarks.md). So nothing durable lists the pending conversations: a search reads its
// owner's conversations through conversations_owner (as its own query does) and checks each row;
// the background indexer learns the appended conversations from Append, in memory (hints, a
// bounded queue), and looks through every conversation when that queue overflowed.
//
// The background indexer is a goroutine rather than work done by the writer "when idle": the
// writer cannot tell idle from between two appends, and the delay lets one transaction take
// the messages of many appends (FTS5 writes one new segment per transaction: that per-commit
// flush was most of what indexing cost an append).

// indexBatch bounds one indexing transaction: at most this many log entries are read (so at
// most this many messages, each at most 100 000 characters, are indexed) before it commits and
// gives the writer back to waiting appends.
const indexBatch = 256

// pendingPage is how many pending conversations one read returns.
const pendingPage = 64

// indexDelay is how long the background indexer waits after an append before it indexes: the
// appends of that time share its transactions.
const indexDelay = 50 * time.Millisecond

// maxHints bounds the appended conversations queued for the background indexer. Past it an
// append's hint is dropped and the next round looks through every conversation instead.
const maxHints = 1024

// messageBodySQL is a message's searchable text from its entry's data: the text, the excerpt
// markers (\x02, \x03) removed, cut at 100 000 characters. Upgrade 6 wrote it the same way.
//
// Data that is not JSON (Append refuses it; a file written otherwise may hold some) indexes as
// no text rather than failing the indexing transaction, which would stall every conversation
// indexed with it and every search of its owner.
const messageBodySQL = `CASE WHEN json_valid(CAST(data AS TEXT)) THEN substr(replace(replace(coalesce(json_extract(CAST(data AS TEXT), '$.text'), ''), char(2), ''), char(3), ''), 1, 100000) ELSE '' END`

const (
	// indexRangeSQL copies a conversation's messages in (?2, ?3] into message_text. A row that
	// is already there is already right (an entry never changes), so a conflict leaves it.
	indexRangeSQL = `INSERT INTO message_text (conversation_id, seq, body)
	SELECT conversation_id, seq, ` + messageBodySQL + ` FROM entries
	WHERE conversation_id = ?1 AND seq > ?2 AND seq <= ?3 AND type IN ('user_message', 'assistant_message')
	ON CONFLICT (conversation_id, seq) DO NOTHING`
	seqsSQL          = `SELECT indexed_seq, last_seq FROM conversations WHERE id = ?1`
	setIndexedSeqSQL = `UPDATE conversations SET indexed_seq = ?2 WHERE id = ?1`
	// pendingOwnerSQL pages through an owner's pending conversations in rowid order, the
	// order of conversations_owner within one owner.
	pendingOwnerSQL = `SELECT rowid, id, last_seq FROM conversations INDEXED BY conversations_owner
	WHERE owner_id = ?1 AND last_seq > indexed_seq AND rowid > ?2 ORDER BY rowid LIMIT ?3`
	// pendingAnySQL pages through every pending conversation (a scan of the table).
	pendingAnySQL = `SELECT rowid, id, last_seq FROM conversations
	WHERE last_seq > indexed_seq AND rowid > ?1 ORDER BY rowid LIMIT ?2`
)

// pending is a conversation whose log is to be indexed up to upTo.
type pending struct {
	rowid int64
	id    string
	upTo  int64
}

// readPending reads pending conversations through the read-only pool: the common case, nothing
// pending, then costs a search no wait for the writer.
func (d *db) readPending(ctx context.Context, q string, args ...any) ([]pending, error) {
	rows, err := d.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read the conversations not yet indexed: %w", err)
	}
	defer rows.Close()
	var ps []pending
	for rows.Next() {
		var p pending
		if err := rows.Scan(&p.rowid, &p.id, &p.upTo); err != nil {
			return nil, fmt.Errorf("read the conversations not yet indexed: %w", err)
		}
		ps = append(ps, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the conversations not yet indexed: %w", err)
	}
	return ps, nil
}

// indexOwner indexes every message of ownerID's conversations logged before it was called. It
// visits each pending conversation once, in rowid order, so appends made meanwhile cannot keep
// it going.
func (d *db) indexOwner(ctx context.Context, ownerID string) error {
	return d.indexPages(ctx, func(after int64) ([]pending, error) {
		return d.readPending(ctx, pendingOwnerSQL, ownerID, after, pendingPage)
	})
}

// indexScan indexes every pending conversation of the file, visiting each once.
func (d *db) indexScan(ctx context.Context) error {
	return d.indexPages(ctx, func(after int64) ([]pending, error) {
		return d.readPending(ctx, pendingAnySQL, after, pendingPage)
	})
}

// indexPages indexes the conversations that page returns, page after page, each page's rows
// after the last rowid of the one before.
func (d *db) indexPages(ctx context.Context, page func(after int64) ([]pending, error)) error {
	var after int64
	for {
		ps, err := page(after)
		if err != nil || len(ps) == 0 {
			return err
		}
		after = ps[len(ps)-1].rowid
		for len(ps) > 0 {
			if ps, err = d.indexSome(ctx, ps); err != nil {
				return err
			}
		}
	}
}

// indexSome indexes ps, in order, each up to its upTo or its log's end whichever is first, in
// one write transaction that reads at most indexBatch log entries, and returns what it left for
// the next (the first conversation perhaps partly indexed). Where a conversation is indexed up
// to is read inside the transaction: another handle's indexer, or this one's, may have moved it
// since ps was read, and a conversation deleted since is skipped.
func (d *db) indexSome(ctx context.Context, ps []pending) (rest []pending, err error) {
	if err := d.w.acquire(ctx); err != nil {
		return ps, err
	}
	defer d.w.release()
	if _, err := d.w.exec(ctx, beginSQL, nil); err != nil {
		return ps, fmt.Errorf("index messages: begin: %w", mapErr(err))
	}
	defer func() {
		if err != nil {
			_, _ = d.w.exec(context.WithoutCancel(ctx), rollbackSQL, nil) // the indexing error is the one to report
		}
	}()
	budget := int64(indexBatch)
	for len(ps) > 0 && budget > 0 {
		p := ps[0]
		var from, last int64
		switch err := d.w.queryRow(ctx, seqsSQL, []any{p.id}, &from, &last); {
		case errors.Is(err, sql.ErrNoRows): // deleted: nothing left to index
			ps = ps[1:]
			continue
		case err != nil:
			return ps, fmt.Errorf("index conversation %q: %w", p.id, err)
		}
		end := min(p.upTo, last)
		if from >= end {
			ps = ps[1:]
			continue
		}
		to := min(end, from+budget)
		if _, err := d.w.exec(ctx, indexRangeSQL, []any{p.id, from, to}); err != nil {
			return ps, fmt.Errorf("index conversation %q's entries %d to %d: %w", p.id, from+1, to, mapErr(err))
		}
		if _, err := d.w.exec(ctx, setIndexedSeqSQL, []any{p.id, to}); err != nil {
			return ps, fmt.Errorf("index conversation %q: %w", p.id, mapErr(err))
		}
		budget -= to - from
		if to == end {
			ps = ps[1:]
		}
	}
	if _, err := d.w.exec(ctx, commitSQL, nil); err != nil {
		return ps, fmt.Errorf("index messages: commit: %w", mapErr(err))
	}
	return ps, nil
}

// indexer is the background indexer: one goroutine, from Open to Close.
type indexer struct {
	d     *db
	clock clock.Clock
	log   *slog.Logger
	// hints are the conversations appended to, for the next round (capacity maxHints). When it
	// is full a hint is dropped and scan set instead: the next round looks through every
	// conversation, which finds the dropped ones (their rows say they are pending).
	hints chan string
	scan  atomic.Bool
	// kick asks for a round (capacity 1): a kick while one is already waiting is dropped, since
	// the round it waits for takes every hint queued by then.
	kick chan struct{}
	stop context.CancelFunc
	done chan struct{} // closed when run returns
}

func newIndexer(d *db, c clock.Clock, log *slog.Logger) *indexer {
	ix := &indexer{d: d, clock: c, log: log, hints: make(chan string, maxHints), kick: make(chan struct{}, 1), done: make(chan struct{})}
	ix.scan.Store(true) // a look through every conversation at start: what a crash left pending
	ix.kick <- struct{}{}
	return ix
}

// appended asks for conversationID to be indexed in the next round; it never blocks.
func (ix *indexer) appended(conversationID string) {
	select {
	case ix.hints <- conversationID:
	default:
		ix.scan.Store(true)
	}
	select {
	case ix.kick <- struct{}{}:
	default:
	}
}

// start runs the indexer until close.
func (ix *indexer) start() {
	ctx, stop := context.WithCancel(context.Background())
	ix.stop = stop
	go ix.run(ctx)
}

func (ix *indexer) run(ctx context.Context) {
	defer close(ix.done)
	var convs []pending
	seen := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ix.kick:
		}
		t := ix.clock.NewTimer(indexDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		// The hints queued by now, each conversation once, in the order first appended to.
		convs = convs[:0]
		clear(seen)
	drain:
		for {
			select {
			case id := <-ix.hints:
				if !seen[id] {
					seen[id] = true
					convs = append(convs, pending{id: id, upTo: math.MaxInt64})
				}
			default:
				break drain
			}
		}
		// A failure is logged and left: the entries stay pending, for a later round (a scan
		// is asked for, since the hints are gone) or the next search of their owner.
		if err := ix.round(ctx, convs); err != nil && ctx.Err() == nil {
			ix.scan.Store(true)
			ix.log.Warn("index messages for search", "err", err)
		}
	}
}

// round indexes convs, and every pending conversation when a scan was asked for.
func (ix *indexer) round(ctx context.Context, convs []pending) error {
	if ix.scan.Swap(false) {
		return ix.d.indexScan(ctx)
	}
	for len(convs) > 0 && ctx.Err() == nil {
		var err error
		if convs, err = ix.d.indexSome(ctx, convs); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// close stops the indexer (a round in progress ends at its next transaction, rolled back when
// it was cut) and waits for it.
func (ix *indexer) close() {
	ix.stop()
	<-ix.done
}
