package mcpadapter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What the adapter reads from a server is bounded before it is held: each message (a stdio
// line, an HTTP response body, an SSE event) by Config.MaxMessageBytes, and a whole tools/list
// (every page together) by Config.MaxListBytes. A message past its bound fails the session (the
// SDK's reader stops and the supervisor reconnects with backoff), as any broken transport does:
// a hostile server costs at most one message's bytes per attempt, never its whole answer.
//
// The SDK has the bounds for the line and the event (IOTransport.MaxLineLength,
// StreamableClientTransport.MaxEventSize), and they are used; but its CommandTransport does not
// take one, its streamable client leaves events unbounded when MaxEventSize is 0, and it reads
// an application/json response whole (io.ReadAll). So the adapter starts the child itself
// (commandTransport), always sets MaxEventSize, and bounds the other bodies in the HTTP client
// (boundBodies).

// Default bounds of what a server sends.
const (
	DefaultMaxMessageBytes = 4 << 20 // one message
	DefaultMaxListBytes    = 8 << 20 // one tools/list, every page together
	maxListPages           = 64      // pages of one tools/list
)

// ErrMessageTooLarge is the failure of a session whose server sent a message past its bound.
var ErrMessageTooLarge = errors.New("the MCP server sent a message larger than its bound (max_message_bytes)")

// ErrListTooLarge is the failure of a session whose server's tool list is past its bound.
var ErrListTooLarge = errors.New("the MCP server's tool list is larger than its bound (max_list_bytes)")

func (c Config) maxMessage() int {
	if c.MaxMessageBytes > 0 {
		return c.MaxMessageBytes
	}
	return DefaultMaxMessageBytes
}

func (c Config) maxList() int {
	if c.MaxListBytes > 0 {
		return c.MaxListBytes
	}
	return DefaultMaxListBytes
}

// commandTransport is the SDK's CommandTransport with its line bound: it starts the child and
// speaks newline-delimited JSON over its pipes (mcp.IOTransport, whose MaxLineLength bounds each
// line read), and closes it as the SDK does (stdin first, then SIGTERM, then SIGKILL).
type commandTransport struct {
	cmd       *exec.Cmd
	terminate time.Duration
	maxLine   int
}

var _ mcp.Transport = (*commandTransport)(nil)

func (t *commandTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("stdout: %w", err)
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	if err := t.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the server: %w", err)
	}
	// The connection is closed by closing the child's input (childInput.Close), not its output,
	// which ends when the child does.
	pipes := &mcp.IOTransport{Reader: noClose{stdout}, Writer: &childInput{cmd: t.cmd, stdin: stdin, terminate: t.terminate}, MaxLineLength: t.maxLine}
	conn, err := pipes.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

type noClose struct{ io.Reader }

func (noClose) Close() error { return nil }

// childInput is the child's standard input; closing it ends the child: the MCP specification's
// stdio shutdown (close its input, wait, SIGTERM, wait, SIGKILL). The waits are in real time:
// they wait on a real process, whatever clock the adapter was given.
type childInput struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	terminate time.Duration
}

func (c *childInput) Write(p []byte) (int, error) { return c.stdin.Write(p) }

func (c *childInput) Close() error {
	if err := c.stdin.Close(); err != nil {
		return fmt.Errorf("close the server's input: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }() // ends when the child does, which the steps below ensure
	wait := func() (error, bool) {
		t := time.NewTimer(c.terminate)
		defer t.Stop()
		select {
		case err := <-exited:
			return err, true
		case <-t.C:
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if c.cmd.Process.Signal(syscall.SIGTERM) == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := c.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill the server: %w", err)
	}
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("the server process does not exit")
}

// boundBodies bounds every HTTP response body from a server that is not an event stream to max
// bytes (an event stream is long-lived, and its events are bounded one by one by the SDK's
// MaxEventSize). Past the bound a read fails with ErrMessageTooLarge, which fails the session.
type boundBodies struct {
	base http.RoundTripper
	max  int
}

func (b boundBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := b.base.RoundTrip(r)
	if err != nil || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	resp.Body = &boundedBody{body: resp.Body, left: int64(b.max), max: b.max}
	return resp, nil
}

// boundedBody reads at most max bytes of body, then fails if more follow.
type boundedBody struct {
	body io.ReadCloser
	left int64
	max  int
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		n, err := b.body.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("%w: a response of more than %d bytes", ErrMessageTooLarge, b.max)
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.body.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.body.Close() }

// overflowed reports whether err is a session's failure on a bound: the adapter's own, or the
// SDK's for a line or an event (which it reports as text, without a sentinel).
func overflowed(err error) bool {
	if errors.Is(err, ErrMessageTooLarge) || errors.Is(err, ErrListTooLarge) {
		return true
	}
	msg := err.Error()
	for _, sdk := range []string{ErrMessageTooLarge.Error(), "frame exceeded the configured maximum", "SSE event exceeded"} {
		if strings.Contains(msg, sdk) {
			return true
		}
	}
	return false
}
