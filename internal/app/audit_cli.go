package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"parley/internal/auditanchor"
	"parley/internal/store"
	"parley/internal/web"
)

// auditPage is how many records `web audit` reads at a time: the chain is walked in constant
// memory however long it is.
const auditPage = 5000

// auditVerify: web audit verify [--anchor FILE]…. It walks the whole chain, checking each
// record's keyed link with the audit key and the chain against the anchors (PARLEY_AUDIT_ANCHOR_FILE,
// or the files given), and exits 0 when every record follows from the one before it and the
// chain passes through every anchored head; otherwise it fails naming the first record that
// differs or is missing.
func auditVerify(ctx context.Context, cfg Config, log *slog.Logger, args []string, std IO) error {
	fs := newFlags("audit verify", std)
	var files stringsFlag
	fs.Var(&files, "anchor", "an anchor file to check the chain against (repeatable; default PARLEY_AUDIT_ANCHOR_FILE, in development the data directory's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("audit verify takes no arguments besides --anchor")
	}
	key, err := loadAuditKey(cfg, log, false) // never a new key: it would verify nothing
	if err != nil {
		return err
	}
	warn := func(format string, args ...any) { fmt.Fprintf(std.Stderr, "web: warning: "+format+"\n", args...) }
	if key == nil {
		warn("no audit key (PARLEY_AUDIT_KEY, PARLEY_AUDIT_KEY_FILE, or %s): keyed records cannot be checked",
			filepath.Join(cfg.DataDir, devAuditKeyFile))
	}
	if len(files) == 0 {
		if f := auditAnchorFile(cfg); f != "" {
			files = append(files, f)
		}
	}
	var anchors *store.Anchors
	if len(files) > 0 && key != nil {
		var warnings []string
		if anchors, warnings, err = auditanchor.Read(key, files...); err != nil {
			return err
		}
		for _, w := range warnings {
			warn("%s", w)
		}
	}
	if anchors == nil || anchors.Len() == 0 {
		warn("no audit anchor to check the chain against (PARLEY_AUDIT_ANCHOR_FILE, --anchor): " +
			"records deleted from its end, or a chain rewritten whole in the unkeyed form of before, are not detected")
	}
	st, err := openStoreKeyed(ctx, cfg, log, key, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	rep, err := VerifyAudit(ctx, st, key, anchors)
	if err != nil {
		return err
	}
	fmt.Fprintf(std.Stdout, "audit chain intact: %d records, head %s\n", rep.Records, rep.Head)
	if rep.Unkeyed > 0 {
		fmt.Fprintf(std.Stdout, "  the first %d are unkeyed (written before the chain was keyed; the keyed records after them vouch for them)\n", rep.Unkeyed)
	}
	if anchors != nil && anchors.Len() > 0 {
		newest := anchors.Newest()
		fmt.Fprintf(std.Stdout, "  checked against %d anchors; the newest, written at %s, is record %d\n",
			anchors.Len(), newest.At.UTC().Format(time.RFC3339), newest.Seq)
		if n := rep.Records - newest.Seq; n > 0 {
			fmt.Fprintf(std.Stdout, "  %d records are newer than the newest anchor (not anchored yet)\n", n)
		}
	}
	return nil
}

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (f *stringsFlag) String() string     { return strings.Join(*f, ",") }
func (f *stringsFlag) Set(v string) error { *f = append(*f, v); return nil }

// AuditReport is what VerifyAudit checked.
type AuditReport struct {
	Records int64  // records in the chain
	Unkeyed int64  // of them, at its start, written before the chain was keyed
	Head    string // the newest record's hash
}

// VerifyAudit checks the store's audit chain from its first record with key (nil: only
// unkeyed records can be checked) and against anchors (nil: none); the error is a
// *store.ChainBreak naming the first record that does not follow, differs from an anchor, or
// is missing.
func VerifyAudit(ctx context.Context, st store.Store, key *store.AuditKey, anchors *store.Anchors) (AuditReport, error) {
	v := store.ChainVerifier{Key: key, Anchors: anchors}
	var after int64
	for {
		page, err := st.AuditChain(ctx, after, auditPage)
		if err != nil {
			return AuditReport{}, fmt.Errorf("read the audit chain: %w", err)
		}
		for _, r := range page {
			if err := v.Next(r); err != nil {
				return AuditReport{}, err
			}
			after = r.Seq
		}
		if len(page) < auditPage {
			if err := v.End(); err != nil {
				return AuditReport{}, err
			}
			n, head := v.Verified()
			return AuditReport{Records: n, Unkeyed: v.Unkeyed(), Head: head}, nil
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
