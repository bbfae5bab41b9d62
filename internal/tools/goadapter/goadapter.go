// Package goadapter runs host-approved Go adapters by key. The host fills a Registry in code
// (key → adapter, display metadata, enabled flag); runtime configuration names only a key and a
// params map. Nothing is ever looked up by reflection from runtime text: an unknown or disabled
// key is refused when the tools file is validated at start-up and again at every execution,
// against the registry as it is at that moment.
package goadapter

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"sync"
	"time"

	"parley/internal/fault"
	"parley/internal/tools"
)

// Adapter is host code that runs with a params map. Its outcomes are:
//   - ok: a result (any JSON-encodable value) and a nil error;
//   - error: a *fault.Error the model reads, or any other error (internal, hidden from the model);
//   - retry: an error made with Retry, which the loop's retry scheduler tries again.
type Adapter interface {
	Run(ctx context.Context, params map[string]any) (any, error)
}

// Func adapts a function to Adapter.
type Func func(ctx context.Context, params map[string]any) (any, error)

// Run calls f.
func (f Func) Run(ctx context.Context, params map[string]any) (any, error) { return f(ctx, params) }

// RetryError is the retry outcome: a transient failure worth another attempt.
type RetryError struct {
	Err   error
	After time.Duration
}

func (e *RetryError) Error() string { return "retry: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *RetryError) Unwrap() error { return e.Err }

// Retry wraps err as the retry outcome; after is the wait the adapter asks for (0: the
// scheduler's backoff).
func Retry(err error, after time.Duration) error {
	if err == nil {
		err = errors.New("transient failure")
	}
	return &RetryError{Err: err, After: after}
}

// Entry is one approved adapter with its display metadata.
type Entry struct {
	Key     string
	Adapter Adapter
	// Label, Description and Category are for editors and the tool list.
	Label       string
	Description string
	Category    string
	Enabled     bool
}

// Info is an entry's safe metadata, without the adapter.
type Info struct {
	Key         string `json:"key"`
	Label       string `json:"label,omitempty"`
	Description string `json:"description,omitempty"`
	Category    string `json:"category,omitempty"`
	Enabled     bool   `json:"enabled"`
}

// Registry holds the approved adapters. It is safe for concurrent use; the host may disable an
// adapter while the app runs and the next execution sees it.
type Registry struct {
	mu      sync.RWMutex
	entries map[string]Entry // guarded by mu
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{entries: map[string]Entry{}} }

var keyRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)

// Errors of the registry.
var (
	ErrUnknown  = errors.New("unknown adapter")
	ErrDisabled = errors.New("adapter is disabled")
)

// Register adds an entry; a malformed key, a nil adapter or a duplicate key is refused.
func (r *Registry) Register(e Entry) error {
	if !keyRE.MatchString(e.Key) {
		return fmt.Errorf("register adapter %q: a key is dot-separated lower-case words (billing.load_invoice)", e.Key)
	}
	if e.Adapter == nil {
		return fmt.Errorf("register adapter %q: no adapter", e.Key)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.entries[e.Key]; dup {
		return fmt.Errorf("register adapter %q: the key is taken", e.Key)
	}
	r.entries[e.Key] = e
	return nil
}

// SetEnabled turns an adapter on or off.
func (r *Registry) SetEnabled(key string, enabled bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[key]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknown, key)
	}
	e.Enabled = enabled
	r.entries[key] = e
	return nil
}

// Lookup returns the enabled entry for key; an unknown or disabled key is an error wrapping
// ErrUnknown or ErrDisabled. A nil registry knows no adapters.
func (r *Registry) Lookup(key string) (Entry, error) {
	if r == nil {
		return Entry{}, fmt.Errorf("%w %q: no adapter registry is configured", ErrUnknown, key)
	}
	r.mu.RLock()
	e, ok := r.entries[key]
	r.mu.RUnlock()
	switch {
	case !ok:
		return Entry{}, fmt.Errorf("%w %q", ErrUnknown, key)
	case !e.Enabled:
		return Entry{}, fmt.Errorf("%w: %q", ErrDisabled, key)
	}
	return e, nil
}

// Validate is the start-up check of a key.
func (r *Registry) Validate(key string) error {
	_, err := r.Lookup(key)
	return err
}

// List returns every entry's metadata, sorted by key, for editor catalogs.
func (r *Registry) List() []Info {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Info, 0, len(r.entries))
	for _, e := range r.entries {
		out = append(out, Info{Key: e.Key, Label: e.Label, Description: e.Description, Category: e.Category, Enabled: e.Enabled})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Precheck is the tools.Spec.Precheck of a tool bound to key: before an attempt is recorded,
// the key must still name an enabled adapter (permission_denied otherwise), so a call to an
// adapter disabled since start-up is refused without an attempt. ToolFunc checks again when it
// runs.
func Precheck(r *Registry, key string) tools.PrecheckFunc {
	return func(ctx context.Context, args map[string]any) error {
		if _, err := r.Lookup(key); err != nil {
			return fault.Errorf(fault.KindPermissionDenied, "adapter %q is not available: %v", key, err)
		}
		return nil
	}
}

// ToolFunc is the callback of a tool bound to key: at each call it resolves the key in the
// registry as it is then (refusing an unknown or disabled key with permission_denied), runs the
// adapter with the model's arguments as params and maps the outcome.
func ToolFunc(r *Registry, key string) tools.Func {
	return func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
		e, err := r.Lookup(key)
		if err != nil {
			return nil, fault.Errorf(fault.KindPermissionDenied, "adapter %q is not available: %v", key, err)
		}
		if args == nil {
			args = map[string]any{}
		}
		res, err := e.Adapter.Run(ctx, args)
		if err == nil {
			return res, nil
		}
		var re *RetryError
		if errors.As(err, &re) {
			te := fault.Errorf(fault.KindServiceUnavailable, "adapter %q asked to retry", key)
			var inner *fault.Error
			if errors.As(re.Err, &inner) {
				cp := *inner
				te = &cp
			}
			te.Retryable = true
			te.RetryAfter = re.After
			return nil, te
		}
		return nil, fmt.Errorf("adapter %q: %w", key, err)
	}
}
