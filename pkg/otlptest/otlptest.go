// Package otlptest is an OTLP receiver in the process: the collector's
// protocol over gRPC and over HTTP (protobuf), on loopback ports of its
// own, keeping what it receives for a test to look at. Tests point
// OTEL_EXPORTER_OTLP_ENDPOINT at it to check what the binaries export;
// the benchmark exports to it to measure what export costs.
package otlptest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened: its ids in hex, its attributes
// and its resource's as strings.
type Span struct {
	TraceID, SpanID, ParentID string
	Name                      string
	Kind                      string
	Attributes                map[string]string
	Resource                  map[string]string
	Events                    []string
	Start, End                time.Time
	// Protocol is how it came: "grpc" or "http/protobuf".
	Protocol string
}

// Attr is the span's attribute key ("" when it has none).
func (s Span) Attr(key string) string { return s.Attributes[key] }

// Receiver is a running OTLP receiver.
type Receiver struct {
	// Discard counts spans without keeping them (the benchmark's).
	Discard bool

	grpcSrv  *grpc.Server
	httpSrv  *http.Server
	grpcAddr string
	httpAddr string

	mu      sync.Mutex
	spans   []Span
	count   int
	metrics map[string]int // metric name → data points received
	headers []map[string]string
	changed chan struct{}
}

// Start starts a receiver on two free loopback ports.
func Start() (*Receiver, error) {
	r := &Receiver{metrics: map[string]int{}, changed: make(chan struct{})}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = gl.Close()
		return nil, err
	}
	r.grpcAddr, r.httpAddr = gl.Addr().String(), hl.Addr().String()
	r.grpcSrv = grpc.NewServer()
	colltrace.RegisterTraceServiceServer(r.grpcSrv, traceService{r: r})
	collmetrics.RegisterMetricsServiceServer(r.grpcSrv, metricsService{r: r})
	go func() { _ = r.grpcSrv.Serve(gl) }()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.httpTraces)
	mux.HandleFunc("POST /v1/metrics", r.httpMetrics)
	r.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.httpSrv.Serve(hl) }()
	return r, nil
}

// GRPCEndpoint is the gRPC endpoint, as OTEL_EXPORTER_OTLP_ENDPOINT takes
// it with OTEL_EXPORTER_OTLP_PROTOCOL=grpc.
func (r *Receiver) GRPCEndpoint() string { return "http://" + r.grpcAddr }

// HTTPEndpoint is the HTTP endpoint (base URL: the exporters add
// /v1/traces and /v1/metrics), for OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf.
func (r *Receiver) HTTPEndpoint() string { return "http://" + r.httpAddr }

// Close stops both servers.
func (r *Receiver) Close() {
	r.grpcSrv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = r.httpSrv.Shutdown(ctx)
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Count is how many spans were received (kept or not).
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Metrics returns how many data points of each metric were received.
func (r *Receiver) Metrics() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.metrics))
	for k, v := range r.metrics {
		out[k] = v
	}
	return out
}

// Headers returns the request headers (gRPC metadata) of every export
// received, keys in lower case.
func (r *Receiver) Headers() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]string(nil), r.headers...)
}

// Changed is closed at the next export received: wait on it rather than
// poll.
func (r *Receiver) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Await waits until cond holds of the spans received, or ctx ends.
func (r *Receiver) Await(ctx context.Context, cond func([]Span) error) error {
	for {
		ch := r.Changed()
		err := cond(r.Spans())
		if err == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("otlptest: %w (last: %v)", ctx.Err(), err)
		}
	}
}

func (r *Receiver) addTraces(req *colltrace.ExportTraceServiceRequest, protocol string, headers map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.headers = append(r.headers, headers)
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.count++
				if r.Discard {
					continue
				}
				var events []string
				for _, e := range sp.GetEvents() {
					events = append(events, e.GetName())
				}
				r.spans = append(r.spans, Span{
					TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					ParentID: hex.EncodeToString(sp.GetParentSpanId()), Name: sp.GetName(),
					Kind: strings.TrimPrefix(sp.GetKind().String(), "SPAN_KIND_"), Attributes: attrs(sp.GetAttributes()),
					Resource: res, Events: events, Protocol: protocol,
					Start: time.Unix(0, int64(sp.GetStartTimeUnixNano())), End: time.Unix(0, int64(sp.GetEndTimeUnixNano())),
				})
			}
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Receiver) addMetrics(req *collmetrics.ExportMetricsServiceRequest, headers map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.headers = append(r.headers, headers)
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				n := len(m.GetSum().GetDataPoints()) + len(m.GetHistogram().GetDataPoints()) + len(m.GetGauge().GetDataPoints()) +
					len(m.GetExponentialHistogram().GetDataPoints())
				r.metrics[m.GetName()] += n
			}
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = value(kv.GetValue())
	}
	return out
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	default:
		return fmt.Sprint(v)
	}
}

type traceService struct {
	colltrace.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(ctx context.Context, req *colltrace.ExportTraceServiceRequest) (*colltrace.ExportTraceServiceResponse, error) {
	s.r.addTraces(req, "grpc", grpcHeaders(ctx))
	return &colltrace.ExportTraceServiceResponse{}, nil
}

type metricsService struct {
	collmetrics.UnimplementedMetricsServiceServer
	r *Receiver
}

func (s metricsService) Export(ctx context.Context, req *collmetrics.ExportMetricsServiceRequest) (*collmetrics.ExportMetricsServiceResponse, error) {
	s.r.addMetrics(req, grpcHeaders(ctx))
	return &collmetrics.ExportMetricsServiceResponse{}, nil
}

func grpcHeaders(ctx context.Context) map[string]string {
	out := map[string]string{}
	md, _ := metadata.FromIncomingContext(ctx)
	for k, v := range md {
		out[strings.ToLower(k)] = strings.Join(v, ",")
	}
	return out
}

func httpHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[strings.ToLower(k)] = strings.Join(v, ",")
	}
	return out
}

// body reads an OTLP/HTTP request body, gzip or not.
func body(req *http.Request) ([]byte, error) {
	var rd io.Reader = io.LimitReader(req.Body, 64<<20)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(rd)
		if err != nil {
			return nil, err
		}
		rd = zr
	}
	var buf bytes.Buffer
	_, err := buf.ReadFrom(rd)
	return buf.Bytes(), err
}

func (r *Receiver) httpTraces(w http.ResponseWriter, req *http.Request) {
	var in colltrace.ExportTraceServiceRequest
	if err := decode(req, &in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.addTraces(&in, "http/protobuf", httpHeaders(req.Header))
	reply(w, &colltrace.ExportTraceServiceResponse{})
}

func (r *Receiver) httpMetrics(w http.ResponseWriter, req *http.Request) {
	var in collmetrics.ExportMetricsServiceRequest
	if err := decode(req, &in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.addMetrics(&in, httpHeaders(req.Header))
	reply(w, &collmetrics.ExportMetricsServiceResponse{})
}

func decode(req *http.Request, m proto.Message) error {
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		return errors.New("otlptest: only application/x-protobuf is served, not " + ct)
	}
	b, err := body(req)
	if err != nil {
		return err
	}
	return proto.Unmarshal(b, m)
}

func reply(w http.ResponseWriter, m proto.Message) {
	b, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}
