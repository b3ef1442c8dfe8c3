package main

// The window span, built as OTLP protobuf directly (no OpenTelemetry SDK: a few MiB less, and
// one span per window needs none of its machinery). Its shape is the Python agent's
// (probes/window_span.py): name "probe window", a child of the controller's window span
// through the W3C traceparent of OpenWindow, the kernel's counters as attributes, one
// "reading" event per node and one event per sample. WindowDone.trace carries a serialized
// ExportTraceServiceRequest; TracesData has the same single field (resource_spans = 1), so
// its bytes are that request's.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"swarmscope.dev/probereader/pb"
)

// eventLimit matches swarmscope.core.sys.otlpjson.EVENT_LIMIT: events beyond it are counted in
// swarmscope.bpf.events_dropped.
const eventLimit = 1024

func attr(k string, v any) *commonpb.KeyValue {
	var av *commonpb.AnyValue
	switch x := v.(type) {
	case string:
		av = &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: x}}
	case uint64:
		av = &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(x)}}
	case int:
		av = &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(x)}}
	case float64:
		av = &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: x}}
	}
	return &commonpb.KeyValue{Key: k, Value: av}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// parseTraceparent: (trace id, parent span id) of a W3C traceparent, nil ids when absent/bad.
func parseTraceparent(tp string) ([]byte, []byte) {
	parts := strings.Split(strings.TrimSpace(tp), "-")
	if len(parts) < 4 || len(parts[1]) != 32 || len(parts[2]) != 16 {
		return nil, nil
	}
	tid, err1 := hex.DecodeString(parts[1])
	sid, err2 := hex.DecodeString(parts[2])
	if err1 != nil || err2 != nil {
		return nil, nil
	}
	return tid, sid
}

func newWindowSpan(cmd *pb.OpenWindow, c *config, start uint64) *tracepb.Span {
	tid, parent := parseTraceparent(cmd.GetTraceparent())
	if tid == nil {
		tid = randomBytes(16)
	}
	return &tracepb.Span{
		TraceId:           tid,
		SpanId:            randomBytes(8),
		ParentSpanId:      parent,
		Name:              "probe window",
		Kind:              tracepb.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano: start,
		Attributes: []*commonpb.KeyValue{
			attr("swarmscope.run_id", cmd.GetRunId()),
			attr("swarmscope.window_id", cmd.GetWindowId()),
			attr("swarmscope.probe_id", c.probeID),
			attr("swarmscope.node", c.node),
		},
	}
}

// annotate: the kernel's view of the window onto the span (probes/window_span.py's annotate).
func annotate(s *tracepb.Span, readings []*pb.Reading, end uint64) {
	off := uint64(time.Now().UnixNano()) - monotonicNs()
	budget := eventLimit - len(readings)
	dropped := 0
	for _, r := range readings {
		attrs := []*commonpb.KeyValue{attr("node", r.GetNode())}
		for _, k := range sortedKeys(r.GetCounters()) {
			attrs = append(attrs, attr(k, r.GetCounters()[k]))
		}
		if r.GetError() != "" {
			attrs = append(attrs, attr("error", r.GetError()))
		}
		s.Events = append(s.Events, &tracepb.Span_Event{TimeUnixNano: end, Name: "reading", Attributes: attrs})
		for _, k := range sortedKeys(r.GetCounters()) {
			s.Attributes = append(s.Attributes, attr(fmt.Sprintf("swarmscope.kernel.%s.%s", r.GetNode(), k), r.GetCounters()[k]))
		}
		smp := append([]*pb.Sample(nil), r.GetSamples()...)
		if len(smp) == 0 {
			continue
		}
		sort.Slice(smp, func(i, j int) bool { return smp[i].GetEndNs() < smp[j].GetEndNs() })
		first, last := smp[0].GetStartNs(), smp[0].GetEndNs()
		for _, x := range smp {
			first, last = min(first, x.GetStartNs()), max(last, x.GetEndNs())
		}
		s.Attributes = append(s.Attributes,
			attr(fmt.Sprintf("swarmscope.bpf.%s.first_ns", r.GetNode()), first),
			attr(fmt.Sprintf("swarmscope.bpf.%s.last_ns", r.GetNode()), last))
		for _, x := range smp {
			if budget <= 0 {
				dropped++
				continue
			}
			budget--
			ea := []*commonpb.KeyValue{
				attr("node", r.GetNode()), attr("bpf.enter_ns", x.GetStartNs()),
				attr("bpf.exit_ns", x.GetEndNs()), attr("entries", x.GetValue()),
			}
			s.Events = append(s.Events, &tracepb.Span_Event{TimeUnixNano: x.GetEndNs() + off, Name: x.GetSeries(), Attributes: ea})
		}
	}
	if dropped > 0 {
		s.Attributes = append(s.Attributes, attr("swarmscope.bpf.events_dropped", dropped))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func serviceName() string {
	if v := os.Getenv("OTEL_SERVICE_NAME"); v != "" {
		return v
	}
	return "swarmscope-probe"
}

// encodeSpans: one finished span as ExportTraceServiceRequest bytes, with the probe's resource.
func encodeSpans(c *config, spans ...*tracepb.Span) []byte {
	req := &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
			attr("service.name", serviceName()),
			attr("service.version", c.version),
			attr("process.pid", os.Getpid()),
			attr("host.name", c.node),
			attr("swarmscope.probe.reader", "native"),
		}},
		ScopeSpans: []*tracepb.ScopeSpans{{
			Scope: &commonpb.InstrumentationScope{Name: "swarmscope-probe", Version: c.version},
			Spans: spans,
		}},
	}}}
	b, err := proto.Marshal(req)
	if err != nil {
		return nil
	}
	return b
}

// otlpExporter sends each window's spans to $OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, over
// OTLP/gRPC (plain text, as the project's collectors on loopback) or OTLP/HTTP protobuf
// ($OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL=http/protobuf), best effort: a failed export is
// logged, never retried; the spans reach the run's trace through WindowDone anyway. flush()
// waits (bounded) for exports in flight, so the last window's span is sent before exit.
type otlpExporter struct {
	conn    *grpc.ClientConn // grpc
	url     string           // http/protobuf
	pending sync.WaitGroup
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

func newOTLPExporter() *otlpExporter {
	ep := firstEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	exporters := os.Getenv("OTEL_TRACES_EXPORTER")
	if ep == "" || (exporters != "" && !strings.Contains(strings.ToLower(exporters), "otlp")) {
		return nil
	}
	switch proto := firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); proto {
	case "", "grpc":
		target := strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
		conn, err := grpc.NewClient("passthrough:///"+strings.TrimSuffix(target, "/"),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintf(os.Stderr, "swarmscope-probe-reader: OTLP endpoint %s: %v\n", ep, err)
			return nil
		}
		return &otlpExporter{conn: conn}
	case "http/protobuf":
		url := ep // the signal-specific variable is the full URL; the generic one gets the path
		if os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			url = strings.TrimSuffix(ep, "/") + "/v1/traces"
		}
		return &otlpExporter{url: url}
	default:
		fmt.Fprintf(os.Stderr, "swarmscope-probe-reader: OTLP protocol %q not supported (grpc, http/protobuf): "+
			"spans go back in WindowDone only\n", proto)
		return nil
	}
}

func (x *otlpExporter) export(blob []byte) {
	if x == nil || len(blob) == 0 {
		return
	}
	x.pending.Add(1)
	go func() {
		defer x.pending.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if x.conn != nil {
			req := &tracepb.TracesData{}
			if err = proto.Unmarshal(blob, req); err == nil {
				// The reply (ExportTraceServiceResponse) is read as Empty: its fields are unused.
				err = x.conn.Invoke(ctx, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", req, &emptypb.Empty{})
			}
		} else {
			var req *http.Request
			if req, err = http.NewRequestWithContext(ctx, http.MethodPost, x.url, bytes.NewReader(blob)); err == nil {
				req.Header.Set("Content-Type", "application/x-protobuf")
				var resp *http.Response
				if resp, err = http.DefaultClient.Do(req); err == nil {
					_ = resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						err = fmt.Errorf("HTTP %s", resp.Status)
					}
				}
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "swarmscope-probe-reader: OTLP export failed: %v\n", err)
		}
	}()
}

// flush waits for the exports in flight, at most 5 s.
func (x *otlpExporter) flush() {
	if x == nil {
		return
	}
	done := make(chan struct{})
	go func() { x.pending.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}
