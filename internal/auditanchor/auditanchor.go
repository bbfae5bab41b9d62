// Package auditanchor keeps the audit chain's signed heads (store.AuditHead) outside the
// database, where `web audit verify` reads them back: a file of JSON lines, one head per line,
// appended after each commit that moved the chain (PARLEY_AUDIT_ANCHOR_FILE). Whoever can write
// the database but not this file cannot cut the chain's newest records off unnoticed: the
// anchors written before the cut name records the chain no longer has, or no longer has alike.
//
// A line is the head as JSON (store.AuditHead's fields), signed with the audit key's anchor
// subkey. The writer appends from a goroutine of its own, so a commit never waits for the disk:
// heads that arrive while a line is being written are coalesced to the newest, each line is
// written with one write(2) on a file opened O_APPEND, then fsynced. Several processes may
// append to one file on a local file system (each line is one small write); a file per process
// is as good — verify reads them all.
package auditanchor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"parley/internal/store"
)

// File appends heads to an anchor file. It implements store.AuditAnchor.
type File struct {
	path string
	f    *os.File
	log  *slog.Logger

	mu      sync.Mutex
	pending *store.AuditHead // the newest head not written yet
	written int64            // the place of the newest head written

	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	failed atomic.Int64 // writes that failed (logged)
}

var _ store.AuditAnchor = (*File)(nil)

// OpenFile opens (creating it, mode 0600) the anchor file at path for appending and starts its
// writer. A nil logger logs nothing.
func OpenFile(path string, log *slog.Logger) (*File, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the audit anchor file: %w", err)
	}
	w := &File{path: path, f: f, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w, nil
}

// Anchor queues h to be written; it never blocks on the disk.
func (w *File) Anchor(h store.AuditHead) {
	w.mu.Lock()
	if h.Seq > w.written && (w.pending == nil || h.Seq > w.pending.Seq) {
		w.pending = &h
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Failed counts the writes that failed.
func (w *File) Failed() int64 { return w.failed.Load() }

// Close writes the head still waiting and closes the file. Calling it twice is harmless.
func (w *File) Close() error {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	return nil
}

func (w *File) run() {
	defer close(w.done)
	defer w.f.Close()
	for {
		select {
		case <-w.kick:
			w.flush()
		case <-w.stop:
			w.flush()
			return
		}
	}
}

// flush writes the pending head, if any.
func (w *File) flush() {
	w.mu.Lock()
	h := w.pending
	w.pending = nil
	w.mu.Unlock()
	if h == nil {
		return
	}
	line, err := json.Marshal(h)
	if err == nil {
		_, err = w.f.Write(append(line, '\n'))
	}
	if err == nil {
		err = w.f.Sync()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failed.Add(1)
		w.log.Error("audit anchor not written: the chain's newest records are not anchored", "file", w.path, "seq", h.Seq, "err", err)
		if w.pending == nil { // try again with the next head, or at Close
			w.pending = h
		}
		return
	}
	w.written = max(w.written, h.Seq)
}

// Read reads the anchor files at paths, each line a head that must be signed with key, into
// the anchors store.ChainVerifier checks the chain against. A file that does not exist anchors
// nothing (a warning); a last line cut short (no newline: a crash while it was written) is
// skipped with a warning. Any other line that is not a head signed with key is an error: the
// anchor itself was changed, or written with another key.
func Read(key *store.AuditKey, paths ...string) (anchors *store.Anchors, warnings []string, err error) {
	anchors = &store.Anchors{}
	for _, path := range paths {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			warnings = append(warnings, fmt.Sprintf("anchor file %s does not exist: nothing was anchored there", path))
			continue
		}
		if err != nil {
			return nil, warnings, fmt.Errorf("read the audit anchors: %w", err)
		}
		w, err := readFile(key, path, f, anchors)
		f.Close()
		warnings = append(warnings, w...)
		if err != nil {
			return nil, warnings, err
		}
	}
	return anchors, warnings, nil
}

func readFile(key *store.AuditKey, path string, r io.Reader, anchors *store.Anchors) (warnings []string, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(bytes.TrimSpace(line)) > 0 {
				warnings = append(warnings, fmt.Sprintf("anchor file %s: line %d is cut short (a crash while it was written?) and was skipped", path, n))
			}
			return warnings, nil
		}
		if err != nil {
			return warnings, fmt.Errorf("read anchor file %s: %w", path, err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var h store.AuditHead
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&h); err != nil {
			return warnings, fmt.Errorf("anchor file %s line %d is not an anchor: %w", path, n, err)
		}
		if err := key.CheckHead(h); err != nil {
			return warnings, fmt.Errorf("anchor file %s line %d (record %d): %w", path, n, h.Seq, err)
		}
		anchors.Add(h)
	}
}
