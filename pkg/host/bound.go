package host

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/graphorin/graphorin-go/pkg/bound"
	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/spillstore"
	"github.com/graphorin/graphorin-go/pkg/telemetry"
)

// resultHeadroom is what a result message needs besides its output: the
// envelope, an error, a handle's preview.
const resultHeadroom = 64 << 10

// boundInput is a successful output: text (a tool whose output type is
// string, not encoded yet) or JSON.
type boundInput struct {
	text string
	raw  json.RawMessage // nil for text
}

// bound sets res.Output to the output kept within the tool's token cap
// (REF-T1..T5) and within one NATS message: an output too big for one is
// spilled whatever the cap says (or, when secret, cut with middle), so a
// result never crosses the bus whole when it cannot. h is nil for a call
// not hosted here (no bounds known).
func (s *Host) bound(ctx context.Context, h *hosted, x *contracts.ExecRequest, res *contracts.Result, in boundInput, log *slog.Logger) {
	limit := s.nc.MaxPayload() - resultHeadroom
	text, structured := in.text, in.raw != nil
	var force bool
	if structured {
		text, structured = outputText(in.raw)
		force = int64(len(in.raw)) > limit
	} else {
		// Escaping can only lengthen a text: count it only when its size
		// alone does not settle the question.
		n := int64(len(in.text)) + 2
		force = n > limit || (6*n > limit && int64(jsonStringLen(in.text)) > limit)
	}
	whole := func() {
		if in.raw != nil {
			res.Output = in.raw
			return
		}
		res.Output, _ = json.Marshal(in.text)
	}
	if h == nil {
		whole()
		return
	}
	strategy := h.def.TruncationStrategy
	if strategy == "" {
		strategy = contracts.TruncateMiddle
	}
	if structured && strategy == contracts.TruncateMiddle {
		// REF-T4: cutting the middle out of JSON leaves no JSON; keep it
		// whole behind a handle instead.
		strategy = contracts.TruncateSpill
	}
	req := bound.Request{
		Body:       text,
		MaxTokens:  h.def.EffectiveMaxResultTokens(),
		Strategy:   strategy,
		Counter:    s.cfg.Counter,
		Summarizer: s.cfg.Summarizer,
		Secret:     h.def.EffectiveSensitivity() == contracts.Secret,
		Force:      force,
	}
	if req.Force {
		req.Strategy = contracts.TruncateSpill
	}
	if s.spill != nil {
		req.Spiller = &spiller{s: s, h: h, x: x}
	}
	o := bound.Bound(ctx, req)
	if !o.Truncated {
		whole()
		return
	}
	res.Output, _ = json.Marshal(o.Body)
	if o.Spilled != nil {
		res.Handle = &contracts.ResultHandle{URI: o.Handle, Kind: contracts.HandleSpillFile, Preview: o.Body,
			Bytes: o.Spilled.Bytes, MediaType: o.Spilled.MediaType, ProducerTrustClass: telemetry.TrustClass(h.def.Source)}
	}
	s.metrics.truncated.Add(ctx, 1, metric.WithAttributes(attribute.String("strategy", string(o.Strategy))))
	trace.SpanFromContext(ctx).SetAttributes(attribute.Bool(telemetry.AttrTruncationApplied, true),
		attribute.String(telemetry.AttrTruncationStrategy, string(o.Strategy)))
	if o.FallbackReason != "" {
		log.Warn("result bounded with middle instead", "strategy", strategy, "reason", o.FallbackReason)
	}
	log.Info("result bounded", "strategy", o.Strategy, "original_tokens", o.OriginalTokens, "kept_tokens", o.KeptTokens, "handle", o.Handle)
}

// jsonStringLen is the length of s encoded as a JSON string, near enough
// to tell whether it fits a message: quotes, backslashes and control
// characters are escaped (six bytes at most per byte).
func jsonStringLen(s string) int {
	n := len(s) + 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			n++
		case c < 0x20:
			n += 5
		}
	}
	return n
}

// outputText is the text a cap applies to: a string output as the string,
// anything else as its JSON.
func outputText(out json.RawMessage) (string, bool) {
	t := bytes.TrimSpace(out)
	if len(t) > 0 && t[0] == '"' {
		var s string
		if json.Unmarshal(t, &s) == nil {
			return s, false
		}
	}
	return string(out), true
}

// spiller writes a call's body to the spill store, scanned once whole
// (REF-T10) and tagged with its producer's taint.
type spiller struct {
	s *Host
	h *hosted
	x *contracts.ExecRequest
}

func (p *spiller) Spill(ctx context.Context, req bound.SpillRequest) (*bound.Spilled, error) {
	scan := contracts.ScanUnknown
	if r := p.s.cfg.Scanner.Scan(ctx, req.Body); r.Complete {
		scan = contracts.ScanClean
		if len(r.Hits) > 0 {
			scan = contracts.ScanFound
		}
	}
	ref := contracts.SpillRef{RunID: p.x.RunID, CallID: p.x.CallID, Ext: req.Ext}
	var body io.Reader = strings.NewReader(req.Body)
	if p.s.cfg.WrapSpill != nil {
		body = p.s.cfg.WrapSpill(body)
	}
	putCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	def := p.h.def
	info, err := p.s.spill.Put(putCtx, ref, body, spillstore.Meta{
		Tool:        p.x.Tool,
		TrustClass:  telemetry.TrustClass(def.Source),
		Source:      def.Source,
		Sensitivity: def.EffectiveSensitivity(),
		MediaType:   bound.MediaType(req.Ext),
		Scan:        scan,
	})
	if err != nil {
		return nil, err
	}
	p.s.metrics.spills.Add(ctx, 1)
	p.s.metrics.spillBytes.Add(ctx, info.Size)
	return &bound.Spilled{Handle: ref.Handle(), Bytes: info.Size, MediaType: bound.MediaType(req.Ext), ImperativeScan: scan}, nil
}
