package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		on      bool
		proto   string
		url     string
		wantErr string
	}{
		{name: "nothing set: off", env: nil},
		{name: "base endpoint: http with the signal path", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"},
			on: true, proto: "http/protobuf", url: "http://collector:4318/v1/traces"},
		{name: "traces endpoint used as it is", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b/custom"},
			on: true, proto: "http/protobuf", url: "https://b/custom"},
		{name: "exporter otlp alone: the exporter's default endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true, proto: "http/protobuf"},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			on: true, proto: "grpc", url: "http://collector:4317"},
		{name: "traces protocol wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
			on: true, proto: "http/protobuf"},
		{name: "exporter none wins over an endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318"}},
		{name: "another exporter is refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "otlp only"},
		{name: "http/json is refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: "http/protobuf or grpc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, on, err := FromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || on != tc.on || cfg.Protocol != tc.proto || cfg.EndpointURL != tc.url {
				t.Fatalf("got %+v on=%v err=%v; want on=%v %q %q", cfg, on, err, tc.on, tc.proto, tc.url)
			}
		})
	}
}

// TestOffIsNil: with nothing configured New starts nothing and every call on the nil tracer is
// a no-op that leaves contexts alone.
func TestOffIsNil(t *testing.T) {
	tr, err := New(context.Background(), func(string) string { return "" }, "")
	if err != nil || tr != nil {
		t.Fatalf("New with nothing set: %v, %v; want nil, nil", tr, err)
	}
	s := tr.Chat(trace.SpanContext{}, "conv", "openai:gpt", 10)
	if s.Recording() || s.Context().IsValid() {
		t.Fatal("a span of the nil tracer records")
	}
	s.EndChat(1, 2, "stop", "")
	tr.RecordSuspension(trace.SpanContext{}, trace.SpanContext{}, Suspension{})
	ctx := context.Background()
	if ContextWith(ctx, s.Context()) != ctx {
		t.Fatal("ContextWith an invalid span changed the context")
	}
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		s := tr.Tool(trace.SpanContext{}, "conv", "call", "tool", 1)
		s.End("")
		a := tr.Append(trace.SpanContext{}, "conv", 1, 1, true)
		a.End("")
	})
	if allocs != 0 {
		t.Fatalf("the off path allocates %v times", allocs)
	}
}

// TestTraceparentGoesOut: a request made under a span carries its traceparent, through Inject
// and through Transport; one made without a span carries none.
func TestTraceparentGoesOut(t *testing.T) {
	got := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
	}))
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := FromProvider(tp, nil)
	span := tr.Tool(trace.SpanContext{}, "conv", "call_1", "webhook", 1)
	ctx := ContextWith(context.Background(), span.Context())
	want := "00-" + span.Context().TraceID().String() + "-" + span.Context().SpanID().String() + "-01"

	client := &http.Client{Transport: Transport(nil), Timeout: 10 * time.Second}
	for _, c := range []context.Context{ctx, context.Background()} {
		req, _ := http.NewRequestWithContext(c, "GET", srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if req.Header.Get("traceparent") != "" {
			t.Fatal("Transport changed the caller's request")
		}
	}
	if tp1, tp2 := <-got, <-got; tp1 != want || tp2 != "" {
		t.Fatalf("through Transport: %q and %q, want %q and none", tp1, tp2, want)
	}
	h := http.Header{}
	Inject(ctx, h)
	if h.Get("traceparent") != want {
		t.Fatalf("Inject wrote %q, want %q", h.Get("traceparent"), want)
	}
	h = http.Header{"Traceparent": {"00-set-by-config"}}
	Inject(ctx, h)
	if h.Get("traceparent") != "00-set-by-config" {
		t.Fatal("Inject overwrote a configured traceparent")
	}
	span.End("")
}
