package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"parley/internal/clock"
)

// Search indexing runs outside the appends' transactions (schema version 8, schema.sql): an
// append only moves its conversation's last_seq past indexed_seq, which puts the conversation
// into the partial index conversations_unindexed; the messages logged in between are copied into
// message_text (and by its trigger into the FTS5 index) later, many per transaction:
//
//   - by a search, which first indexes its owner's conversations up to their logs as they were
//     when it looked (read-your-writes: every append that returned before the search began is
//     found), and
//   - by the background indexer, which indexes every pending conversation indexDelay after a
//     write transaction committed, so that a search rarely finds much to do.
//
// indexed_seq moves in the same transaction as the rows it covers, so a crash loses nothing:
// what was pending stays pending (the indexer also runs once on Open). A deleted conversation
// takes its row, its entries and its pending work with it; a conversation created again under
// the same id starts at indexed_seq 0. The background indexer is a goroutine rather than work
// done by the writer "when idle": the writer cannot tell idle from between two appends, and a
// delay lets one transaction take the messages of many appends (FTS5 writes one new segment per
// transaction: that per-commit flush was most of what indexing cost an append).

// indexBatch bounds one indexing transaction: at most this many log entries are read (so at
// most this many messages, each at most 100 000 characters, are indexed) before it commits and
// gives the writer back to waiting appends.
const indexBatch = 256

// pendingPage is how many pending conversations one read of conversations_unindexed returns.
const pendingPage = 64

// indexDelay is how long the background indexer waits after a commit before it indexes: the
// appends of that time share its transactions.
const indexDelay = 50 * time.Millisecond

// messageBodySQL is a message's searchable text from its entry's data: the text, the excerpt
// markers (\x02, \x03) removed, cut at 100 000 characters. Upgrade 6 wrote it the same way.
const messageBodySQL = `substr(replace(replace(coalesce(json_extract(CAST(data AS TEXT), '$.text'), ''), char(2), ''), char(3), ''), 1, 100000)`

const (
	// indexRangeSQL copies a conversation's messages in (?2, ?3] into message_text. A row that
	// is already there is already right (an entry never changes), so a conflict leaves it.
	indexRangeSQL = `INSERT INTO message_text (conversation_id, seq, body)
	SELECT conversation_id, seq, ` + messageBodySQL + ` FROM entries
	WHERE conversation_id = ?1 AND seq > ?2 AND seq <= ?3 AND type IN ('user_message', 'assistant_message')
	ON CONFLICT (conversation_id, seq) DO NOTHING`
	indexedSeqSQL    = `SELECT indexed_seq FROM conversations WHERE id = ?1`
	setIndexedSeqSQL = `UPDATE conversations SET indexed_seq = ?2 WHERE id = ?1`
	// pendingOwnerSQL pages through an owner's pending conversations in rowid order, the
	// order of conversations_unindexed within one owner.
	pendingOwnerSQL = `SELECT rowid, id, last_seq FROM conversations INDEXED BY conversations_unindexed
	WHERE owner_id = ?1 AND last_seq > indexed_seq AND rowid > ?2 ORDER BY rowid LIMIT ?3`
	// pendingAnySQL takes any pending conversations: those indexed since the last read have
	// left the index, so the next read starts at its beginning again.
	pendingAnySQL = `SELECT rowid, id, last_seq FROM conversations INDEXED BY conversations_unindexed
	WHERE last_seq > indexed_seq LIMIT ?1`
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
	var after int64
	for {
		ps, err := d.readPending(ctx, pendingOwnerSQL, ownerID, after, pendingPage)
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

// indexAll indexes every pending conversation, until none is left or ctx ends.
func (d *db) indexAll(ctx context.Context) error {
	for ctx.Err() == nil {
		ps, err := d.readPending(ctx, pendingAnySQL, pendingPage)
		if err != nil || len(ps) == 0 {
			return err
		}
		for len(ps) > 0 && ctx.Err() == nil {
			if ps, err = d.indexSome(ctx, ps); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// indexSome indexes ps, in order, in one write transaction that reads at most indexBatch log
// entries, and returns what it left for the next (the first conversation perhaps partly
// indexed). Where a conversation is indexed up to is read inside the transaction: another
// handle's indexer, or this one's, may have moved it since ps was read, and a conversation
// deleted since is skipped.
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
		var from int64
		switch err := d.w.queryRow(ctx, indexedSeqSQL, []any{p.id}, &from); {
		case errors.Is(err, sql.ErrNoRows): // deleted: nothing left to index
			ps = ps[1:]
			continue
		case err != nil:
			return ps, fmt.Errorf("index conversation %q: %w", p.id, err)
		}
		if from >= p.upTo {
			ps = ps[1:]
			continue
		}
		to := min(p.upTo, from+budget)
		if _, err := d.w.exec(ctx, indexRangeSQL, []any{p.id, from, to}); err != nil {
			return ps, fmt.Errorf("index conversation %q's entries %d to %d: %w", p.id, from+1, to, mapErr(err))
		}
		if _, err := d.w.exec(ctx, setIndexedSeqSQL, []any{p.id, to}); err != nil {
			return ps, fmt.Errorf("index conversation %q: %w", p.id, mapErr(err))
		}
		budget -= to - from
		if to == p.upTo {
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
	// kick asks for a round (capacity 1): a kick while one is already waiting is dropped, since
	// the round it waits for will see that commit too.
	kick chan struct{}
	stop context.CancelFunc
	done chan struct{} // closed when run returns
}

func newIndexer(d *db, c clock.Clock, log *slog.Logger) *indexer {
	ix := &indexer{d: d, clock: c, log: log, kick: make(chan struct{}, 1), done: make(chan struct{})}
	ix.kick <- struct{}{} // a round at start: what a crash left pending
	return ix
}

// notify asks for a round after a commit; it never blocks.
func (ix *indexer) notify() {
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
		// A failure is logged and left: the entries stay pending, for the next round or search.
		if err := ix.d.indexAll(ctx); err != nil && ctx.Err() == nil {
			ix.log.Warn("index messages for search", "err", err)
		}
	}
}

// close stops the indexer (a round in progress ends at its next transaction, rolled back when
// it was cut) and waits for it.
func (ix *indexer) close() {
	ix.stop()
	<-ix.done
}
