package pgstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"parley/internal/fault"
)

// connHealth notices that the database went away under the pools' connections. After a
// restart every idle connection is dead, and each would fail the next request that drew it:
// once any statement fails for want of its connection, every connection is pinged before it is
// handed out for suspectFor, so one request pays for the discovery instead of one per
// connection (a dead one is dropped and the pool draws or opens another). It is the
// connections' tracer and the pools' ShouldPing.
type connHealth struct {
	lastLost atomic.Int64 // Unix nanoseconds of the last statement that lost its connection
}

// suspectFor is how long after a lost connection every connection is pinged before use.
const suspectFor = 10 * time.Second

// idlePing is pgxpool's own rule, kept: a connection idle longer than this is pinged.
const idlePing = time.Second

func (h *connHealth) install(cfg *pgxpool.Config) {
	cfg.ConnConfig.Tracer = h
	cfg.ShouldPing = h.shouldPing
}

func (h *connHealth) shouldPing(_ context.Context, p pgxpool.ShouldPingParams) bool {
	// Wall clock: this bounds real I/O, like the connections' own deadlines.
	return p.IdleDuration > idlePing || time.Since(time.Unix(0, h.lastLost.Load())) < suspectFor
}

// saw records a statement that lost its connection: it failed, not because its own context
// ended (a slow query past its deadline says nothing of the other connections), and pgx closed
// the connection (a reset, an administrator's shutdown, a crash).
func (h *connHealth) saw(ctx context.Context, conn *pgx.Conn, err error) {
	if err != nil && ctx.Err() == nil && conn != nil && conn.IsClosed() && fault.Unavailable(err) {
		h.lastLost.Store(time.Now().UnixNano())
	}
}

// TraceQueryStart implements pgx.QueryTracer.
func (h *connHealth) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (h *connHealth) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	h.saw(ctx, conn, d.Err)
}

// TraceBatchStart implements pgx.BatchTracer.
func (h *connHealth) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (h *connHealth) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	h.saw(ctx, conn, d.Err)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (h *connHealth) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchEndData) {
	h.saw(ctx, conn, d.Err)
}
