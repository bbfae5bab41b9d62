package sqlcore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"parley/internal/store"
)

// This file is what a conversation's owner does to the conversation itself: rename it, delete
// it, find it by its title.

// SetConversationTitle implements store.Store. The title changes without touching the log or
// updated_at (a rename is not activity, so it does not reorder the list).
func (c *Core) SetConversationTitle(ctx context.Context, id, title string, onlyIfUntitled bool) (bool, error) {
	q := `UPDATE conversations SET title = $1 WHERE id = $2`
	if onlyIfUntitled {
		q += ` AND title = ''`
	}
	n, err := c.DB.Exec(ctx, q, title, id)
	if err != nil {
		return false, fmt.Errorf("set the title of conversation %q: %w", id, err)
	}
	if n > 0 {
		return true, nil
	}
	if _, err := c.GetConversation(ctx, id); err != nil {
		return false, err
	}
	return false, nil
}

// DeleteConversation implements store.Store: the conversation's row goes, and with it its log,
// calls, timers and steps (on PostgreSQL by the trigger of migration 014, which runs after the
// row is locked and deleted, so an append in flight commits first and its rows go too; on SQLite
// by ON DELETE CASCADE) and its cluster ownership; the audit trail and the outbox stay, and audit
// is added to the trail in the same transaction.
func (c *Core) DeleteConversation(ctx context.Context, id string, audit store.AuditRecord) error {
	at := c.now()
	if !audit.At.IsZero() {
		at = ts(audit.At)
	}
	var seq int64
	var head string
	err := c.inTx(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `DELETE FROM conversations WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		audit.ConversationID, audit.At = id, at
		seq, head, err = c.writeAudit(ctx, tx, []store.AuditRecord{audit}) // chained like every record
		return err
	})
	if err != nil {
		return fmt.Errorf("delete conversation %q: %w", id, err)
	}
	c.Anchored(seq, head, c.now())
	return nil
}

// SearchConversations implements store.Store: the owner's conversations whose title holds
// query, ignoring case (the database's lower(): every letter on PostgreSQL, ASCII letters on
// SQLite), most recently updated first.
func (c *Core) SearchConversations(ctx context.Context, ownerID, query string, limit int) ([]store.Conversation, error) {
	pattern := "%" + escapeLike(query) + "%"
	cs, err := queryAll(ctx, c.DB, `SELECT `+convCols+` FROM conversations WHERE owner_id = $1 AND lower(title) LIKE lower($2) ESCAPE '\'
		ORDER BY updated_at DESC, created_at DESC, id LIMIT $3`, []any{ownerID, pattern, int64(limitOrAll(limit))}, scanConv)
	if err != nil {
		return nil, fmt.Errorf("search conversations: %w", err)
	}
	return cs, nil
}

// FindConversations implements store.Store with the dialect's full-text search (FindSQL): a
// query with no word (only punctuation) matches titles alone. It runs under SearchTimeout:
// the context's deadline (the driver stops the statement) and, where the dialect has one, the
// database's own statement timeout (SearchTimeoutSQL, in a transaction of the search alone),
// which holds even when the client is gone.
func (c *Core) FindConversations(ctx context.Context, ownerID, query string, limit int) ([]store.SearchHit, error) {
	words := store.SearchWords(query)
	if len(words) > store.MaxSearchWords {
		words = words[:store.MaxSearchWords]
	}
	if len(words) == 0 || c.Dialect.FindSQL == "" {
		cs, err := c.SearchConversations(ctx, ownerID, query, limit)
		if err != nil {
			return nil, err
		}
		hits := make([]store.SearchHit, len(cs))
		for i, cv := range cs {
			hits[i] = store.SearchHit{Conversation: cv}
		}
		return hits, nil
	}
	pattern := "%" + escapeLike(query) + "%"
	args := []any{ownerID, c.Dialect.Match(ownerID, words), pattern, int64(limitOrAll(limit)), anchorWord(words)}
	timeout := c.SearchTimeout
	if timeout <= 0 {
		timeout = store.SearchTimeout
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var hits []store.SearchHit
	find := func(q Querier) (err error) {
		hits, err = queryAll(sctx, q, c.Dialect.FindSQL, args, func(r Rows) (store.SearchHit, error) {
			var h store.SearchHit
			err := r.Scan(&h.ID, &h.OwnerID, &h.Title, &h.Status, &h.LastSeq, &h.CreatedAt, &h.UpdatedAt, &h.Seq, &h.Snippet)
			return h, err
		})
		return err
	}
	var err error
	if c.Dialect.SearchTimeoutSQL == "" {
		err = find(c.DB)
	} else {
		err = c.inTx(sctx, func(tx Tx) error {
			if _, err := tx.Exec(sctx, c.Dialect.SearchTimeoutSQL, strconv.FormatInt(max(timeout.Milliseconds(), 1), 10)); err != nil {
				return err
			}
			return find(tx)
		})
	}
	if err != nil {
		if searchTimedOut(err) || (sctx.Err() != nil && ctx.Err() == nil) {
			return nil, fmt.Errorf("find conversations: %w: %w", store.ErrSearchTimeout, err)
		}
		return nil, fmt.Errorf("find conversations: %w", err)
	}
	if c.Dialect.Excerpt != nil {
		for i := range hits {
			if hits[i].Seq != 0 {
				hits[i].Snippet = c.Dialect.Excerpt(hits[i].Snippet, words)
			}
		}
	}
	return hits, nil
}

// anchorWord is the search word an excerpt's window is placed around (store.SnippetWindow): the
// longest, the likeliest to be rare.
func anchorWord(words []string) string {
	best := words[0]
	for _, w := range words[1:] {
		if len(w) > len(best) {
			best = w
		}
	}
	return best
}

// searchTimedOut reports whether the database stopped a statement at its statement timeout
// (PostgreSQL's query_canceled, 57014).
func searchTimedOut(err error) bool {
	var se interface{ SQLState() string }
	return errors.As(err, &se) && se.SQLState() == "57014"
}

// escapeLike makes s match itself in a LIKE pattern whose escape character is a backslash.
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
