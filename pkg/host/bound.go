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
	"github.com/graphorin/graphorin-go/pkg/taint"
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

// maxBoundRounds bounds how often bound halves a cap to fit one message.
const maxBoundRounds = 8

// bound sets res.Output to the output kept within the tool's token cap
// with its strategy (REF-T1..T5), sanitized by its producer's trust class
// (REF-S1..S4), and within one NATS message: a result whose bounded form
// is still too big is bounded again at half the cap, and a tool with its
// cap disabled whose output does not fit a message is spilled (or, when
// secret, cut with middle). A result never crosses the bus whole when it
// cannot. h is nil for a call not hosted here (no bounds known).
func (s *Host) bound(ctx context.Context, h *hosted, x *contracts.ExecRequest, res *contracts.Result, in boundInput, log *slog.Logger) {
	limit := s.nc.MaxPayload() - resultHeadroom
	text, structured := in.text, in.raw != nil
	if structured {
		text, structured = outputText(in.raw)
	}
	// What a JSON encoder would carry anyway; a spilled body is then
	// always UTF-8, and pages never split a rune.
	text = strings.ToValidUTF8(text, "\uFFFD")
	whole := func() {
		if in.raw != nil {
			res.Output = in.raw
			return
		}
		res.Output = encodeJSON(text)
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
		Secret:     h.def.EffectiveSensitivity() == contracts.Secret || (res.Taint != nil && res.Taint.Sensitive),
	}
	if req.MaxTokens == 0 && wholeSize(in, text) > limit {
		// The cap is off but the output cannot cross the bus: keep all of
		// it, behind a handle.
		req.Force, req.Strategy = true, contracts.TruncateSpill
	}
	// The producer's class, or the less trusted one its output carries
	// (REF-D12: a script that read a web page).
	trust := resultTrust(h.def, res.Taint)
	if store := s.spillStore(ctx); store != nil {
		req.Spiller = &spiller{s: s, store: store, h: h, x: x, trust: trust}
	}
	for round := 1; ; round++ {
		o := bound.Bound(ctx, req)
		if o.Truncated {
			s.metrics.truncated.Add(ctx, 1, metric.WithAttributes(attribute.String("strategy", string(o.Strategy))))
			trace.SpanFromContext(ctx).SetAttributes(attribute.Bool(telemetry.AttrTruncationApplied, true),
				attribute.String(telemetry.AttrTruncationStrategy, string(o.Strategy)))
			if o.FallbackReason != "" {
				log.Warn("result bounded with middle instead", "strategy", req.Strategy, "reason", o.FallbackReason)
			}
			log.Info("result bounded", "strategy", o.Strategy, "original_tokens", o.OriginalTokens, "cap_tokens", req.MaxTokens, "kept_tokens", o.KeptTokens, "handle", o.Handle)
		}
		// Sanitization comes last (REF-X2), on what the caller will see,
		// by the producer's trust class (REF-D11, S1..S4).
		san := s.sanitize(ctx, h, x, trust, o.Body)
		if san.Blocked {
			res.Status = contracts.StatusError
			res.Output, res.Handle = nil, nil
			res.Error = contracts.NewError(contracts.KindInboundSanitizationBlocked,
				"the output of %s matched %s and the tool fails closed", x.Tool, strings.Join(san.Hits, ", "))
			return
		}
		body := san.Body
		res.Handle = nil
		if !o.Truncated && body == text {
			whole() // as the tool returned it: structured outputs stay structured
		} else {
			// REF-T4: an output that bounding or sanitizing changed is
			// that string.
			res.Output = encodeJSON(body)
		}
		if o.Spilled != nil {
			res.Handle = &contracts.ResultHandle{URI: o.Handle, Kind: contracts.HandleSpillFile, Preview: body,
				Bytes: o.Spilled.Bytes, MediaType: o.Spilled.MediaType, ProducerTrustClass: string(trust)}
		}
		size := len(res.Output)
		if res.Handle != nil {
			size += len(encodeJSON(res.Handle.Preview))
		}
		if int64(size) <= limit || round == maxBoundRounds {
			return
		}
		// Within the cap but not within a message (wide runes, escaping,
		// the preview carried twice): the same strategy at half the cap.
		next := req.MaxTokens / 2
		if next == 0 {
			next = contracts.DefaultMaxResultTokens
		}
		if o.Truncated && o.KeptTokens > 0 {
			next = min(next, o.KeptTokens/2)
		}
		req.MaxTokens, req.Force = max(next, 1), true
		log.Info("bounded result too big for one message; bounding it again", "bytes", size, "limit", limit, "max_tokens", req.MaxTokens)
	}
}

// wholeSize is the size of the output encoded whole, near enough to tell
// whether it fits a message.
func wholeSize(in boundInput, text string) int64 {
	if in.raw != nil {
		return int64(len(in.raw))
	}
	return int64(contracts.JSONStringLen(text))
}

// encodeJSON encodes v as results are encoded: no HTML escaping, so that
// what is measured is what is sent.
func encodeJSON(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
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

// sanitize applies the producer's inbound sanitization policy to the text
// the caller will see, counts and audits hits (REF-S4), and notes them on
// the span.
func (s *Host) sanitize(ctx context.Context, h *hosted, x *contracts.ExecRequest, trust taint.TrustClass, text string) taint.Sanitized {
	policy := taint.DefaultPolicy(trust)
	san := s.cfg.Scanner.Sanitize(ctx, taint.SanitizeInput{Body: text, Tool: x.Tool, Trust: trust, Policy: policy, FailClosed: h.def.FailClosed})
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.Int(telemetry.AttrSanitizationHitCount, len(san.Hits)),
			attribute.Float64(telemetry.AttrSanitizationScore, san.Score))
	}
	if len(san.Findings) == 0 && len(san.Hits) == 0 {
		return san
	}
	for _, p := range san.Hits {
		s.metrics.sanitizeHits.Add(ctx, 1, metric.WithAttributes(attribute.String("pattern", p),
			attribute.String("trustClass", string(trust)), attribute.String("toolName", x.Tool)))
	}
	action := string(policy)
	switch {
	case san.Blocked:
		action = "blocked"
		s.metrics.sanitizeBlocked.Add(ctx, 1, metric.WithAttributes(attribute.String("toolName", x.Tool)))
	case len(san.Hits) == 0:
		// Only quoted or discussed matches: nothing was done to the
		// output, and the row says why.
		action = "not-addressed"
	}
	// The row names whose call it was, and is deduplicated by the call's
	// run key: by the run id alone, another tenant's call with the same
	// ids, made first, would have this one's row dropped as a duplicate.
	s.audit(contracts.AuditRow{Action: "tool:result:sanitization:hit", Actor: s.cfg.ID, Target: x.Tool, Decision: action,
		Tenant: x.Tenant, Principal: x.Principal,
		Metadata: map[string]any{"patterns": san.Hits, "policyAction": action, "trustClass": string(trust), "runId": x.RunID, "callId": x.CallID,
			"score": san.Score, "threshold": san.Threshold, "findings": auditFindings(san.Findings), "complete": san.Complete}},
		"sanitization-hit/"+contracts.DedupeID(x.Run(), x.CallID))
	return san
}

// maxAuditFindings bounds the findings one audit row lists; the row says
// how many there were.
const maxAuditFindings = 32

// auditFindings is the findings as an audit row shows them: which stage
// found what, where, with which score, and why a finding did not count.
func auditFindings(fs []taint.Finding) map[string]any {
	shown := fs[:min(len(fs), maxAuditFindings)]
	return map[string]any{"total": len(fs), "shown": shown}
}

// spiller writes a call's body to the spill store, scanned once whole
// (REF-T10) and tagged with its producer's taint.
type spiller struct {
	s     *Host
	store *spillstore.Store
	h     *hosted
	x     *contracts.ExecRequest
	trust taint.TrustClass // the result's (resultTrust)
}

func (p *spiller) Spill(ctx context.Context, req bound.SpillRequest) (*bound.Spilled, error) {
	scan := contracts.ScanUnknown
	// Scanned with the producer's own policy's threshold, the one its
	// pages are re-sanitized with when read (REF-T9).
	ptrust := taint.TrustClass(telemetry.TrustClass(p.h.def.Source))
	r := p.s.cfg.Scanner.ScanFor(ctx, req.Body, taint.DefaultPolicy(ptrust), p.h.def.FailClosed)
	switch {
	case len(r.Hits) > 0:
		scan = contracts.ScanFound // even if the scan ran out of time later
	case r.Complete:
		scan = contracts.ScanClean
	}
	if err := p.s.spillAllowance(ctx, p.x, int64(len(req.Body))); err != nil {
		return nil, err
	}
	ref := contracts.SpillRef{RunID: p.x.RunID, CallID: p.x.CallID, Ext: req.Ext}
	name := ref.ObjectIn(p.x.Scope)
	var body io.Reader = strings.NewReader(req.Body)
	if p.s.cfg.WrapSpill != nil {
		body = p.s.cfg.WrapSpill(body)
	}
	putCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	def := p.h.def
	trust := p.trust
	info, err := p.store.Put(putCtx, name, body, spillstore.Meta{
		Tool:        p.x.Tool,
		TrustClass:  string(trust),
		Source:      def.Source,
		Sensitivity: def.EffectiveSensitivity(),
		MediaType:   bound.MediaType(req.Ext),
		Scan:        scan,
		Policy:      string(taint.DefaultPolicy(trust)),
		FailClosed:  def.FailClosed,
	})
	if err != nil {
		return nil, err
	}
	p.s.metrics.spills.Add(ctx, 1)
	p.s.metrics.spillBytes.Add(ctx, info.Size)
	return &bound.Spilled{Handle: ref.Handle(), Bytes: info.Size, MediaType: bound.MediaType(req.Ext), ImperativeScan: scan}, nil
}

// spillStore returns the spill store, opening it when it is not open yet
// (at most every 30s): a store that was unavailable at start is used once
// it is back. Nil means spills fall back to middle (REF-T5).
func (s *Host) spillStore(ctx context.Context) *spillstore.Store {
	if s.cfg.NoSpill {
		return nil
	}
	s.spillMu.Lock()
	defer s.spillMu.Unlock()
	if s.spill != nil || time.Since(s.spillTried) < 30*time.Second {
		return s.spill
	}
	s.spillTried = time.Now()
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	store, err := spillstore.Open(octx, s.js, s.cfg.Replicas, 0)
	if err != nil {
		s.log.Error("spill store unavailable; spill-to-file falls back to middle", "err", err)
		return nil
	}
	s.spill = store
	return store
}
