package runlog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// Publisher publishes run events on one connection. A nil *Publisher, or
// one switched off, publishes nothing. It is safe for concurrent use.
type Publisher struct {
	nc  *nats.Conn
	by  string
	log *slog.Logger
	off atomic.Bool
	// failures are counted and logged at most once a minute: an event
	// that cannot be published must not flood the logs of a busy worker.
	failures atomic.Int64
	lastLog  atomic.Int64 // unix nanoseconds
}

// NewPublisher returns a publisher that signs its events with by
// (dispatcher, worker, approver, spill).
func NewPublisher(nc *nats.Conn, by string, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Publisher{nc: nc, by: by, log: log}
}

// SetEnabled switches publishing on or off (the benchmark compares the two).
func (p *Publisher) SetEnabled(on bool) {
	if p != nil {
		p.off.Store(!on)
	}
}

// Enabled reports whether events are published. Callers check it before
// they build an event, so that a switched-off publisher costs nothing.
func (p *Publisher) Enabled() bool { return p != nil && !p.off.Load() }

var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Publish sends ev on its subject (a call's, or the run's when CallID is
// empty), without waiting for anything. msgID, when not empty, is the
// event's Nats-Msg-Id: the stream drops a repeat within its dedupe window.
// At is set when zero.
func (p *Publisher) Publish(ev *contracts.RunEvent, msgID string) {
	p.Send(p.Encode(ev, msgID))
}

// Encoded is an event ready to be sent (Encode), or nil: none to send.
type Encoded struct {
	subject, msgID string
	data           []byte
}

// Encode is Publish without the send: a caller that sends the event with
// other messages encodes everything first, so that the messages leave
// together, in one write, rather than each in its own.
func (p *Publisher) Encode(ev *contracts.RunEvent, msgID string) *Encoded {
	if !p.Enabled() || contracts.ValidateID("run id", ev.RunID) != nil || (ev.Scope != "" && !ev.Scope.Valid()) {
		return nil
	}
	if ev.Scope == contracts.DefaultScope {
		ev.Scope = "" // the default tenant's events omit it
	}
	subject := contracts.RunEventSubject(ev.Run(), ev.CallID)
	if ev.Type == contracts.EventProgress {
		subject = contracts.ProgressSubject(ev.Run(), ev.CallID)
	}
	data, ok := p.encode(subject, ev)
	if !ok {
		return nil
	}
	return &Encoded{subject: subject, msgID: msgID, data: data}
}

// Send publishes an encoded event, without waiting for anything.
func (p *Publisher) Send(e *Encoded) {
	if e == nil {
		return
	}
	var err error
	if e.msgID == "" {
		err = p.nc.Publish(e.subject, e.data)
	} else {
		m := &nats.Msg{Subject: e.subject, Header: nats.Header{contracts.HeaderMsgID: []string{e.msgID}}, Data: e.data}
		err = p.nc.PublishMsg(m)
	}
	if err != nil {
		p.fail(e.subject, err)
	}
}

// encode is the event's body, reporting (and counting) one that cannot be
// encoded.
func (p *Publisher) encode(subject string, ev *contracts.RunEvent) ([]byte, bool) {
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	if ev.By == "" {
		ev.By = p.by
	}
	buf := bufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer bufs.Put(buf)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	// The subject names the run and the call: the body does not say
	// them again (contracts.DecodeRunEventMsg).
	body := contracts.RunEventBody(ev)
	if err := enc.Encode(body); err != nil {
		p.fail(subject, err)
		return nil, false
	}
	data := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(data) > contracts.MaxRunEventBytes {
		// Provenance or a message grew past what one event may carry:
		// keep the step, drop the detail.
		small := *body
		small.Provenance, small.Message = nil, truncate(ev.Message, 1024)
		buf.Reset()
		if err := enc.Encode(&small); err != nil {
			p.fail(subject, err)
			return nil, false
		}
		data = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	// A copy: the pooled buffer goes back when this returns.
	return bytes.Clone(data), true
}

func (p *Publisher) fail(subject string, err error) {
	n := p.failures.Add(1)
	now := time.Now().UnixNano()
	last := p.lastLog.Load()
	if now-last > int64(time.Minute) && p.lastLog.CompareAndSwap(last, now) {
		p.log.Warn("run event not published", "subject", subject, "err", err, "failures", n)
	}
}

// Failures returns how many events could not be published.
func (p *Publisher) Failures() int64 {
	if p == nil {
		return 0
	}
	return p.failures.Load()
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// Labels returns the taint labels of a trust class and sensitivity as
// events list them: untrusted, sensitive.
func Labels(untrusted, sensitive bool) []string {
	switch {
	case untrusted && sensitive:
		return []string{"untrusted", "sensitive"}
	case untrusted:
		return []string{"untrusted"}
	case sensitive:
		return []string{"sensitive"}
	}
	return nil
}

// Finished builds the finished event of a result.
func Finished(res *contracts.Result) *contracts.RunEvent {
	ev := &contracts.RunEvent{Type: contracts.EventFinished, RunID: res.RunID, CallID: res.CallID, Tool: res.Tool,
		Status: res.Status, DurationMs: res.DurationMs}
	if res.Error != nil {
		ev.ErrorKind, ev.Message = res.Error.Kind, truncate(res.Error.Message, 1024)
		ev.RetryAfterMs = res.Error.RetryAfterMs
	}
	if res.Handle != nil {
		ev.Handle = &contracts.EventHandle{URI: res.Handle.URI, Bytes: res.Handle.Bytes, MediaType: res.Handle.MediaType}
	}
	return ev
}

// FinishedFromBody builds the finished event of a stored result body, nil
// when it does not decode.
func FinishedFromBody(body []byte) *contracts.RunEvent {
	var res contracts.Result
	if json.Unmarshal(body, &res) != nil || res.RunID == "" {
		return nil
	}
	return Finished(&res)
}
