package mcpadapter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
)

// Before the 2026-07-28 protocol a server asks its question on the session while a call runs,
// and nothing in the message names the call. Over streamable HTTP the server sends it on the
// response stream of the call's POST (the protocol's "related request"), which does name it, but
// the SDK's client does not pass the stream on to the elicitation handler. callStreams makes the
// association visible: it reads the SSE stream of each tools/call POST and writes the call's
// progress token into the _meta of each elicitation request on it (metaCall), where elicit finds
// it. Nothing else on the stream is touched; a line too long to be a question passes unread.

// metaCall is the _meta key the adapter writes into a question that arrived on a call's stream.
// A server's own value under it is overwritten: the stream is what counts.
const metaCall = "parley/call"

// maxQuestionLine is the longest SSE line read for a question; longer lines (a large result)
// pass through as they come.
const maxQuestionLine = 64 << 10

// callStreams is an http.RoundTripper that marks the questions on a call's response stream.
type callStreams struct{ base http.RoundTripper }

func (c callStreams) RoundTrip(r *http.Request) (*http.Response, error) {
	token := ""
	if r.Method == http.MethodPost && r.GetBody != nil {
		if body, err := r.GetBody(); err == nil {
			token = callToken(body)
			_ = body.Close()
		}
	}
	resp, err := c.base.RoundTrip(r)
	if err != nil || token == "" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	resp.Body = &markQuestions{body: resp.Body, r: bufio.NewReaderSize(resp.Body, maxQuestionLine), token: token}
	return resp, nil
}

// callToken is the progress token of a tools/call request body ("" for anything else).
func callToken(body io.Reader) string {
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	if json.NewDecoder(io.LimitReader(body, 4<<20)).Decode(&msg) != nil || msg.Method != "tools/call" {
		return ""
	}
	tok, _ := msg.Params.Meta["progressToken"].(string)
	return tok
}

// markQuestions rewrites the data lines of an SSE stream that are elicitation requests.
type markQuestions struct {
	body    io.ReadCloser
	r       *bufio.Reader
	token   string
	out     []byte // read and not yet returned
	passing bool   // inside a line too long to be a question
	err     error
}

func (m *markQuestions) Read(p []byte) (int, error) {
	for len(m.out) == 0 {
		if m.err != nil {
			return 0, m.err
		}
		line, err := m.r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			m.out = append(m.out[:0], line...)
			m.passing = true
			continue
		case err != nil:
			m.err = err
		}
		if m.passing {
			m.out = append(m.out[:0], line...)
			m.passing = err != nil // still inside the line until its newline
			continue
		}
		m.out = append(m.out[:0], m.mark(line)...)
	}
	n := copy(p, m.out)
	m.out = m.out[n:]
	return n, nil
}

// mark returns line with the call's token in its _meta when it is a data line carrying an
// elicitation request, else line unchanged.
func (m *markQuestions) mark(line []byte) []byte {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok || !bytes.Contains(data, []byte("elicitation/create")) {
		return line
	}
	var msg map[string]json.RawMessage
	if json.Unmarshal(data, &msg) != nil || msg["id"] == nil || string(msg["method"]) != `"elicitation/create"` {
		return line
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(msg["params"], &params) != nil || params == nil {
		return line
	}
	meta := map[string]any{}
	if raw, ok := params["_meta"]; ok && json.Unmarshal(raw, &meta) != nil || meta == nil {
		meta = map[string]any{}
	}
	meta[metaCall] = m.token
	var err error
	if params["_meta"], err = json.Marshal(meta); err != nil {
		return line
	}
	if msg["params"], err = json.Marshal(params); err != nil {
		return line
	}
	out, err := json.Marshal(msg)
	if err != nil {
		return line
	}
	// The line keeps its own ending (none at the end of the stream).
	end := line[len(bytes.TrimRight(line, "\r\n")):]
	return append(append([]byte("data: "), out...), end...)
}

func (m *markQuestions) Close() error { return m.body.Close() }
