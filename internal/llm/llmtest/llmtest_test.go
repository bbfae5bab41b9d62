package llmtest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"parley/internal/llm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func req(text string) llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: text}}, Tools: []llm.Tool{json.RawMessage(`{"name":"t"}`)}}
}

func TestPlaysStepsInOrderAndRecordsRequests(t *testing.T) {
	p := New(
		Calls(Call("c1", "echo", map[string]any{"text": "hi"}), Call("c2", "get_current_time", nil)),
		Reply("All done, thanks."),
	)
	evs, resp, err := Collect(context.Background(), p, req("first"))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].ToolCall.ID != "c1" || evs[1].ToolCall.ID != "c2" || resp.StopReason != "tool_use" {
		t.Fatalf("events %+v response %+v", evs, resp)
	}
	if string(resp.ToolCalls[0].Args) != `{"text":"hi"}` || string(resp.ToolCalls[1].Args) != `{}` {
		t.Errorf("args %s %s", resp.ToolCalls[0].Args, resp.ToolCalls[1].Args)
	}
	evs, resp, err = Collect(context.Background(), p, req("second"))
	if err != nil {
		t.Fatal(err)
	}
	var deltas []string
	for _, e := range evs {
		deltas = append(deltas, e.Text)
	}
	if strings.Join(deltas, "|") != "All |done, |thanks." || resp.Text != "All done, thanks." || resp.StopReason != "end_turn" {
		t.Errorf("deltas %q response %+v", deltas, resp)
	}
	if p.Calls() != 2 || p.Remaining() != 0 {
		t.Errorf("calls %d remaining %d", p.Calls(), p.Remaining())
	}
	rs := p.Requests()
	if rs[0].Messages[0].Content != "first" || rs[1].Messages[0].Content != "second" {
		t.Errorf("requests %+v", rs)
	}
	last, ok := p.LastRequest()
	if !ok || last.Messages[0].Content != "second" {
		t.Errorf("last request %+v", last)
	}
}

func TestRecordedRequestsAreCopies(t *testing.T) {
	p := New(Reply("ok"))
	r := req("mine")
	r.Messages = append(r.Messages, llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "a", Args: json.RawMessage(`{"x":1}`)}}})
	if _, _, err := Collect(context.Background(), p, r); err != nil {
		t.Fatal(err)
	}
	r.Messages[0].Content = "changed"
	r.Messages[1].ToolCalls[0].Args[2] = 'y'
	r.Tools[0][2] = 'X'
	got := p.Requests()[0]
	if got.Messages[0].Content != "mine" || string(got.Messages[1].ToolCalls[0].Args) != `{"x":1}` || string(got.Tools[0]) != `{"name":"t"}` {
		t.Errorf("the recorded request changed with the caller's: %+v", got)
	}
}

func TestUnscriptedCallFails(t *testing.T) {
	p := New()
	_, _, err := Collect(context.Background(), p, req("x"))
	if !errors.Is(err, ErrNoStep) {
		t.Fatalf("err = %v", err)
	}
	if ok, _ := llm.IsRetryable(err); ok {
		t.Error("an unscripted call must not look retryable, or a loop would spin")
	}
	p.Push(Reply("late"))
	if _, resp, err := Collect(context.Background(), p, req("y")); err != nil || resp.Text != "late" {
		t.Fatalf("after Push: %v %+v", err, resp)
	}
}

func TestErrorsAfterPartialOutput(t *testing.T) {
	cases := []struct {
		name      string
		err       *llm.Error
		retryable bool
		after     time.Duration
	}{
		{"429", RateLimited(3 * time.Second), true, 3 * time.Second},
		{"503", ServerError(503), true, 0},
		{"cut", Cut(), true, 0},
		{"401", Unauthorized(), false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := New(Step{Deltas: []string{"par", "tial"}, ToolCalls: []llm.ToolCall{Call("c", "x", nil)}, Err: tc.err})
			evs, resp, err := Collect(context.Background(), p, req("x"))
			ok, after := llm.IsRetryable(err)
			if ok != tc.retryable || after != tc.after {
				t.Errorf("IsRetryable = %v %v", ok, after)
			}
			if len(evs) != 2 || resp.Text != "" || resp.ToolCalls != nil {
				t.Errorf("events %+v response %+v: deltas stream, calls never do, and no response", evs, resp)
			}
		})
	}
}

func TestStartedReleaseAndCancellation(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	p := New(Step{Text: "hello world", Started: started, Release: release}, Step{Text: "never", Release: make(chan struct{})})
	got := make(chan string, 4)
	done := make(chan error, 1)
	go func() {
		_, err := p.Stream(context.Background(), req("x"), func(e llm.Event) error {
			got <- e.Text
			return nil
		})
		done <- err
	}()
	<-started
	if first := <-got; first != "hello " {
		t.Fatalf("first delta %q", first)
	}
	select {
	case d := <-got:
		t.Fatalf("delta %q went out before release", d)
	case err := <-done:
		t.Fatalf("returned before release: %v", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rest := <-got; rest != "world" {
		t.Fatalf("rest %q", rest)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := p.Stream(ctx, req("y"), func(llm.Event) error { cancel(); return nil })
		done <- err
	}()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestRespondComputesFromTheRequest(t *testing.T) {
	p := New(Step{Respond: func(r llm.Request) Step {
		last := r.Messages[len(r.Messages)-1]
		if last.Role == llm.RoleTool {
			return Reply("got " + last.Content)
		}
		return Calls(Call("c1", "echo", `{"text":"x"}`))
	}})
	p.Push(p.steps[0])
	_, r1, err := Collect(context.Background(), p, req("go"))
	if err != nil || len(r1.ToolCalls) != 1 {
		t.Fatalf("%v %+v", err, r1)
	}
	next := req("go")
	next.Messages = append(next.Messages, llm.Message{Role: llm.RoleAssistant, ToolCalls: r1.ToolCalls}, llm.Message{Role: llm.RoleTool, ToolCallID: "c1", Content: `{"ok":true}`})
	_, r2, err := Collect(context.Background(), p, next)
	if err != nil || r2.Text != `got {"ok":true}` {
		t.Fatalf("%v %+v", err, r2)
	}
}

func TestConcurrentCallsEachTakeOneStep(t *testing.T) {
	const n = 32
	p := New()
	for i := 0; i < n; i++ {
		p.Push(Reply("x"))
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := Collect(context.Background(), p, req("x"))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if p.Calls() != n || p.Remaining() != 0 {
		t.Fatalf("calls %d remaining %d", p.Calls(), p.Remaining())
	}
}

func TestEmitErrorStops(t *testing.T) {
	stop := errors.New("stop")
	p := New(Step{Text: "a b c", ToolCalls: []llm.ToolCall{Call("c", "x", nil)}})
	n := 0
	_, err := p.Stream(context.Background(), req("x"), func(llm.Event) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("err %v after %d", err, n)
	}
	if New().WithFormat("anthropic").ToolFormat() != "anthropic" {
		t.Error("WithFormat")
	}
}
