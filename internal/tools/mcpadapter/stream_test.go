package mcpadapter

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readMarked(t *testing.T, stream string) string {
	t.Helper()
	body := io.NopCloser(iotest.HalfReader(strings.NewReader(stream)))
	m := &markQuestions{body: body, r: bufio.NewReaderSize(body, maxQuestionLine), token: "tok/1"}
	b, err := io.ReadAll(iotest.OneByteReader(m))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMarkQuestionsOnACallsStream(t *testing.T) {
	question := `data: {"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{"message":"Colour?","_meta":{"parley/call":"forged","x":1}}}` + "\r\n"
	long := "data: " + strings.Repeat("elicitation/create ", 5000) + "\n" // longer than a question may be
	other := "event: message\nid: 3\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n\n"
	out := readMarked(t, other+question+"\n"+long+other)
	lines := strings.Split(out, "\n")
	var got struct {
		Method string `json:"method"`
		Params struct {
			Message string         `json:"message"`
			Meta    map[string]any `json:"_meta"`
		} `json:"params"`
	}
	var marked string
	for _, l := range lines {
		if strings.Contains(l, `"Colour?"`) {
			marked = l
		}
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(marked, "data: ")), &got); err != nil {
		t.Fatalf("marked line %q: %v", marked, err)
	}
	if got.Method != "elicitation/create" || got.Params.Message != "Colour?" || got.Params.Meta[metaCall] != "tok/1" || got.Params.Meta["x"] != float64(1) {
		t.Fatalf("marked %+v", got)
	}
	if !strings.HasPrefix(out, other) || !strings.HasSuffix(out, long+other) {
		t.Fatalf("the rest of the stream changed:\n%q", out)
	}
}

// FuzzMarkQuestions: whatever a server streams, marking never fails or loses bytes, and a
// stream without a question passes unchanged.
func FuzzMarkQuestions(f *testing.F) {
	f.Add("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n")
	f.Add("data: {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"elicitation/create\",\"params\":{}}\n")
	f.Add("data: {\"id\":2,\"method\":\"elicitation/create\",\"params\":null}\r\n")
	f.Add("data: elicitation/create\x00\xff")
	f.Fuzz(func(t *testing.T, stream string) {
		out := readMarked(t, stream)
		if !strings.Contains(stream, "elicitation/create") && out != stream {
			t.Fatalf("changed a stream without a question:\n%q\n%q", stream, out)
		}
		if strings.Count(out, "\n") != strings.Count(stream, "\n") {
			t.Fatalf("lines changed:\n%q\n%q", stream, out)
		}
	})
}
