package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"

	"parley/internal/store"
	"parley/internal/web"
)

// auditPage is how many records `web audit` reads at a time: the chain is walked in constant
// memory however long it is.
const auditPage = 5000

// auditVerify: web audit verify. It walks the whole hash chain and exits 0 when every record
// follows from the one before it; otherwise it fails naming the first broken record.
func auditVerify(ctx context.Context, cfg Config, log *slog.Logger, std IO) error {
	st, err := OpenStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	n, head, err := VerifyAudit(ctx, st)
	if err != nil {
		return err
	}
	fmt.Fprintf(std.Stdout, "audit chain intact: %d records, head %s\n", n, head)
	return nil
}

// VerifyAudit checks the store's audit chain from its first record; the error is a
// *store.ChainBreak naming the first record that does not follow.
func VerifyAudit(ctx context.Context, st store.Store) (n int64, head string, err error) {
	var v store.ChainVerifier
	var after int64
	for {
		page, err := st.AuditChain(ctx, after, auditPage)
		if err != nil {
			return 0, "", fmt.Errorf("read the audit chain: %w", err)
		}
		for _, r := range page {
			if err := v.Next(r); err != nil {
				return 0, "", err
			}
			after = r.Seq
		}
		if len(page) < auditPage {
			n, head = v.Verified()
			return n, head, nil
		}
	}
}

// auditExport: web audit export [--out FILE]. One JSON object per record, in chain order, with
// its hash and its predecessor's (the shape of GET /api/v1/audit).
func auditExport(ctx context.Context, cfg Config, log *slog.Logger, args []string, std IO) error {
	fs := newFlags("audit export", std)
	out := fs.String("out", "", "write to this file instead of standard output")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("audit export takes no arguments besides --out")
	}
	st, err := OpenStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	w := std.Stdout
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("open %s: %w", *out, err)
		}
		defer f.Close()
		w = f
	}
	n, err := ExportAudit(ctx, st, w)
	if err != nil {
		return err
	}
	if *out != "" {
		fmt.Fprintf(std.Stdout, "exported %d audit records to %s\n", n, *out)
	}
	return nil
}

// ExportAudit writes the store's audit chain to w as JSON Lines and says how many records.
func ExportAudit(ctx context.Context, st store.Store, w io.Writer) (int64, error) {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	var after, n int64
	for {
		page, err := st.AuditChain(ctx, after, auditPage)
		if err != nil {
			return n, fmt.Errorf("read the audit chain: %w", err)
		}
		for _, r := range page {
			if err := enc.Encode(web.AuditJSON(r)); err != nil {
				return n, fmt.Errorf("write an audit record: %w", err)
			}
			after = r.Seq
			n++
		}
		if len(page) < auditPage {
			if err := bw.Flush(); err != nil {
				return n, fmt.Errorf("write the audit export: %w", err)
			}
			return n, nil
		}
	}
}
