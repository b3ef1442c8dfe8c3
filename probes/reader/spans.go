package main

// The window span, built as OTLP protobuf directly (no OpenTelemetry SDK: a few MiB less, and
// one span per window needs none of its machinery). Its shape is the Python agent's
// (probes/window_span.py): name "probe window", a child of the controller's window span
// through the W3C traceparent of OpenWindow, the kernel's counters as attributes, one
// "reading" event per node and one event per sample. WindowDone.trace carries a serialized
// ExportTraceServiceRequest; TracesData has the same single field (resource_spans = 1), so
// its bytes are that request's.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strings"
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

// eventLimit matches swarmscope.sys.otlpjson.EVENT_LIMIT: events beyond it are counted in
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

// otlpExporter sends each window's spans to $OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT over
// OTLP/gRPC (plain text, as the project's collectors on loopback), best effort: a failed
// export is logged, never retried; the spans reach the run's trace through WindowDone anyway.
type otlpExporter struct {
	conn *grpc.ClientConn
}

func newOTLPExporter() *otlpExporter {
	ep := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if ep == "" {
		ep = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	exporters := os.Getenv("OTEL_TRACES_EXPORTER")
	if ep == "" || (exporters != "" && !strings.Contains(strings.ToLower(exporters), "otlp")) {
		return nil
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "grpc" {
		fmt.Fprintf(os.Stderr, "swarmscope-probe-reader: OTLP protocol %q not supported (grpc only): spans go back in WindowDone only\n", proto)
		return nil
	}
	target := strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
	conn, err := grpc.NewClient(strings.TrimSuffix(target, "/"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "swarmscope-probe-reader: OTLP endpoint %s: %v\n", ep, err)
		return nil
	}
	return &otlpExporter{conn: conn}
}

func (x *otlpExporter) export(blob []byte) {
	if x == nil || len(blob) == 0 {
		return
	}
	go func() {
		req := &tracepb.TracesData{}
		if proto.Unmarshal(blob, req) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// The reply (ExportTraceServiceResponse) is read as Empty: its fields are not used.
		err := x.conn.Invoke(ctx, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", req, &emptypb.Empty{})
		if err != nil {
			fmt.Fprintf(os.Stderr, "swarmscope-probe-reader: OTLP export failed: %v\n", err)
		}
	}()
}
