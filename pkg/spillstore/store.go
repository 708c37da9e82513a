// Package spillstore keeps spilled tool results in the JetStream object
// store (REF-T6..T11): workers write them, the spill service pages through
// them. A body is written whole before its handle exists anywhere, and it
// is read page by page: a read fetches only the chunks its page covers.
package spillstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/graphorin/graphorin-go/pkg/contracts"
)

// ErrNotFound means no complete object is stored under a name.
var ErrNotFound = errors.New("spillstore: no such result")

// ChunkSize is the object store chunk size spills are written in.
const ChunkSize = 128 << 10

// Meta is the taint a spilled body carries (REF-T6, T10).
type Meta struct {
	Tool        string
	TrustClass  string
	Source      contracts.Source
	Sensitivity contracts.Sensitivity
	MediaType   string
	// Scan is the spill-time scan's verdict: contracts.ScanFound,
	// ScanClean or ScanUnknown.
	Scan string
	// Policy and FailClosed are the producer's inbound sanitization, which
	// reads re-apply to each page (REF-T9).
	Policy     string
	FailClosed bool
}

// Info is a stored object with its taint.
type Info struct {
	Name    string
	Size    int64
	ModTime time.Time
	Meta    Meta
	// SourceJSON is the producer's source as stored.
	SourceJSON json.RawMessage
	nuid       string
	chunks     int
}

// Store is the spill bucket.
type Store struct {
	js     jetstream.JetStream
	obs    jetstream.ObjectStore
	stream jetstream.Stream

	mu      sync.Mutex
	indexes map[string]*index // by object NUID: one per stored version
	order   []string          // NUIDs, oldest first, for eviction
}

// maxIndexes bounds the chunk indexes a Store keeps (a few hundred bytes
// each).
const maxIndexes = 4096

// Open opens the spill bucket, making it when it is missing. ttl is the
// sweep's age (contracts.DefaultSpillTTL when zero). Writers open it this
// way; the spill service, which owns the bucket's settings, uses Configure.
func Open(ctx context.Context, js jetstream.JetStream, replicas int, ttl time.Duration) (*Store, error) {
	return open(ctx, js, replicas, ttl, false)
}

// Configure opens the spill bucket and sets its settings (replicas, the
// TTL backstop) to these, whoever made it first.
func Configure(ctx context.Context, js jetstream.JetStream, replicas int, ttl time.Duration) (*Store, error) {
	return open(ctx, js, replicas, ttl, true)
}

func open(ctx context.Context, js jetstream.JetStream, replicas int, ttl time.Duration, configure bool) (*Store, error) {
	var obs jetstream.ObjectStore
	var err error
	if configure {
		obs, err = js.CreateOrUpdateObjectStore(ctx, contracts.SpillBucketConfig(replicas, ttl))
	} else {
		obs, err = js.ObjectStore(ctx, contracts.SpillBucket)
	}
	if !configure && errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, contracts.SpillBucketConfig(replicas, ttl))
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			obs, err = js.ObjectStore(ctx, contracts.SpillBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("spillstore: bucket %s: %w", contracts.SpillBucket, err)
	}
	stream, err := js.Stream(ctx, streamName)
	if err != nil {
		return nil, fmt.Errorf("spillstore: stream %s: %w", streamName, err)
	}
	return &Store{js: js, obs: obs, stream: stream, indexes: map[string]*index{}}, nil
}

// The object store's stream and chunk subjects (nats.go's layout, which is
// part of the JetStream object store specification, ADR-20).
const streamName = "OBJ_" + contracts.SpillBucket

func chunkSubject(nuid string) string { return "$O." + contracts.SpillBucket + ".C." + nuid }

// Put stores body under ref with its taint. The object becomes visible
// only once every chunk is stored: nats.go publishes the object's meta
// record after its chunks, so a writer that dies midway leaves chunks no
// meta points at (the bucket's TTL removes them) and never a readable
// partial object.
func (s *Store) Put(ctx context.Context, name string, body io.Reader, m Meta) (*Info, error) {
	src, err := json.Marshal(m.Source)
	if err != nil {
		return nil, fmt.Errorf("spillstore: source: %w", err)
	}
	h := nats.Header{}
	h.Set(contracts.HeaderProducerTool, m.Tool)
	h.Set(contracts.HeaderProducerTrustClass, m.TrustClass)
	h.Set(contracts.HeaderProducerSource, string(src))
	h.Set(contracts.HeaderSensitivity, string(m.Sensitivity))
	h.Set(contracts.HeaderMediaType, m.MediaType)
	h.Set(contracts.HeaderImperativeScan, m.Scan)
	h.Set(contracts.HeaderSanitizationPolicy, m.Policy)
	if m.FailClosed {
		h.Set(contracts.HeaderFailClosed, "true")
	}
	var prevNUID string
	if prev, err := s.obs.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted()); err == nil && prev != nil {
		prevNUID = prev.NUID
	}
	oi, err := s.obs.Put(ctx, jetstream.ObjectMeta{
		Name:    name,
		Headers: h,
		Opts:    &jetstream.ObjectMetaOptions{ChunkSize: ChunkSize},
	}, body)
	if err != nil {
		// A chunk may have failed after the meta record went out: make
		// sure no record points at what is missing. Only this attempt's
		// record: the version before it may be behind a handle already.
		delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if info, gerr := s.obs.GetInfo(delCtx, name); gerr == nil && info != nil && info.NUID != prevNUID {
			_ = s.obs.Delete(delCtx, name)
		}
		return nil, fmt.Errorf("spillstore: put %s: %w", name, err)
	}
	return infoOf(oi), nil
}

// Stat returns a stored object's info, or ErrNotFound.
func (s *Store) Stat(ctx context.Context, name string) (*Info, error) {
	oi, err := s.obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("spillstore: %w", err)
	}
	if oi.Deleted {
		return nil, ErrNotFound
	}
	if !validNUID(oi.NUID) {
		// A meta record naming chunks outside this object's subject.
		return nil, errIncomplete
	}
	return infoOf(oi), nil
}

// validNUID reports whether id can be the NUID of an object version: it
// becomes part of a subject, so nothing else is let through.
func validNUID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func infoOf(oi *jetstream.ObjectInfo) *Info {
	h := oi.Headers
	info := &Info{Name: oi.Name, Size: int64(oi.Size), ModTime: oi.ModTime, nuid: oi.NUID, chunks: int(oi.Chunks),
		Meta: Meta{
			Tool:        h.Get(contracts.HeaderProducerTool),
			TrustClass:  h.Get(contracts.HeaderProducerTrustClass),
			Sensitivity: contracts.Sensitivity(h.Get(contracts.HeaderSensitivity)),
			MediaType:   h.Get(contracts.HeaderMediaType),
			Scan:        h.Get(contracts.HeaderImperativeScan),
			Policy:      h.Get(contracts.HeaderSanitizationPolicy),
			FailClosed:  h.Get(contracts.HeaderFailClosed) == "true",
		}}
	if raw := h.Get(contracts.HeaderProducerSource); raw != "" && json.Valid([]byte(raw)) {
		info.SourceJSON = json.RawMessage(raw)
		_ = json.Unmarshal(info.SourceJSON, &info.Meta.Source)
	}
	return info
}

// chunk is one stored chunk of an object.
type chunk struct {
	seq      uint64
	off      int64
	size     int64
	nlBefore int64 // newlines in the chunks before this one
	nl       int64 // newlines in this chunk
}

// index maps an object version's chunks to their stream sequences. It is
// built lazily, as far as reads have needed, so a first page costs one
// chunk fetch whatever the object's size.
type index struct {
	mu      sync.Mutex
	subject string
	size    int64
	want    int // chunks the object has
	chunks  []chunk
	nextSeq uint64
}

func (s *Store) indexFor(info *Info) *index {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.indexes[info.nuid]; x != nil {
		return x
	}
	if len(s.order) >= maxIndexes {
		delete(s.indexes, s.order[0])
		s.order = s.order[1:]
	}
	x := &index{subject: chunkSubject(info.nuid), size: info.Size, want: info.chunks, nextSeq: 1}
	s.indexes[info.nuid] = x
	s.order = append(s.order, info.nuid)
	return x
}

var errIncomplete = errors.New("spillstore: stored object is incomplete")

// discover finds the next chunk of x, returning its data. Callers hold
// x.mu.
func (s *Store) discover(ctx context.Context, x *index) ([]byte, error) {
	if len(x.chunks) >= x.want {
		return nil, io.EOF
	}
	m, err := s.stream.GetMsg(ctx, x.nextSeq, jetstream.WithGetMsgSubject(x.subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, errIncomplete
	}
	if err != nil {
		return nil, err
	}
	c := chunk{seq: m.Sequence, size: int64(len(m.Data)), nl: int64(countNL(m.Data))}
	if n := len(x.chunks); n > 0 {
		last := x.chunks[n-1]
		c.off = last.off + last.size
		c.nlBefore = last.nlBefore + last.nl
	}
	if c.off+c.size > x.size || (len(x.chunks)+1 == x.want && c.off+c.size != x.size) {
		return nil, errIncomplete
	}
	x.chunks = append(x.chunks, c)
	x.nextSeq = m.Sequence + 1
	return m.Data, nil
}

func countNL(b []byte) int {
	n := 0
	for {
		i := indexByte(b, '\n')
		if i < 0 {
			return n
		}
		n++
		b = b[i+1:]
	}
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// chunkData returns chunk k's bytes, discovering chunks up to it.
func (s *Store) chunkData(ctx context.Context, x *index, k int) ([]byte, error) {
	for len(x.chunks) <= k {
		data, err := s.discover(ctx, x)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, errIncomplete
			}
			return nil, err
		}
		if len(x.chunks) == k+1 {
			return data, nil
		}
	}
	m, err := s.stream.GetMsg(ctx, x.chunks[k].seq)
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, ErrNotFound // deleted while being read
		}
		return nil, err
	}
	return m.Data, nil
}

// chunkAt returns the index of the chunk holding byte off (off < size),
// discovering chunks up to it.
func (s *Store) chunkAt(ctx context.Context, x *index, off int64) (int, error) {
	for len(x.chunks) == 0 || x.chunks[len(x.chunks)-1].off+x.chunks[len(x.chunks)-1].size <= off {
		if _, err := s.discover(ctx, x); err != nil {
			if errors.Is(err, io.EOF) {
				return 0, errIncomplete
			}
			return 0, err
		}
	}
	return sort.Search(len(x.chunks), func(i int) bool { return x.chunks[i].off+x.chunks[i].size > off }), nil
}

// rangeBytes returns bytes [from, to) of the object.
func (s *Store) rangeBytes(ctx context.Context, x *index, from, to int64) ([]byte, error) {
	if from >= to {
		return nil, nil
	}
	out := make([]byte, 0, to-from)
	k, err := s.chunkAt(ctx, x, from)
	if err != nil {
		return nil, err
	}
	for pos := from; pos < to; k++ {
		data, err := s.chunkData(ctx, x, k)
		if err != nil {
			return nil, err
		}
		c := x.chunks[k]
		lo, hi := pos-c.off, min(to, c.off+c.size)-c.off
		out = append(out, data[lo:hi]...)
		pos = c.off + hi
	}
	return out, nil
}

// Page is one page of a stored body.
type Page struct {
	Content []byte
	// Offset and End bound the page in the body: [Offset, End).
	Offset, End int64
	EOF         bool
}

// ReadBytes reads up to maxBytes from offset off, at most length bytes
// (length < 0: to the end), per REF-T8's byte mode. The page's ends move to
// rune boundaries so that no UTF-8 sequence is split: the start back, the
// end back unless that would leave the page empty, in which case it takes
// the one whole rune (up to 3 bytes over maxBytes).
func (s *Store) ReadBytes(ctx context.Context, info *Info, off, length, maxBytes int64) (*Page, error) {
	x := s.indexFor(info)
	x.mu.Lock()
	defer x.mu.Unlock()
	total := info.Size
	off = min(max(off, 0), total)
	if length < 0 || length > total-off {
		length = total - off
	}
	end := off + min(length, max(maxBytes, 0)) // no sum of two large inputs: no overflow
	// Fetch a few bytes either side to find rune boundaries.
	lo, hi := max(0, off-(utf8.UTFMax-1)), min(total, end+utf8.UTFMax)
	buf, err := s.rangeBytes(ctx, x, lo, hi)
	if err != nil {
		return nil, err
	}
	at := func(p int64) byte { return buf[p-lo] }
	start := off
	for start > lo && start < total && !utf8.RuneStart(at(start)) {
		start--
	}
	if start < total && !utf8.RuneStart(at(start)) {
		start = off // not UTF-8 here: bytes as they are
	}
	stop := max(end, start)
	for stop > start && stop < total && stop > end-utf8.UTFMax && !utf8.RuneStart(at(stop)) {
		stop--
	}
	if stop < total && stop > start && !utf8.RuneStart(at(stop)) {
		stop = end // not UTF-8 here: bytes as they are
	}
	if stop == start && end > off && start < total {
		// The page would hold nothing: take one whole rune.
		stop = start + 1
		for stop < total && stop < hi && !utf8.RuneStart(at(stop)) {
			stop++
		}
	}
	return &Page{Content: buf[start-lo : stop-lo], Offset: start, End: stop, EOF: stop >= total}, nil
}

// ReadLines reads lines start..end (1-based, inclusive; end 0 means to the
// last line) per REF-T8's line mode: lines split on "\n"; the content is
// capped at maxBytes (on a rune boundary); EOF means the range reached
// the last line and was not capped.
func (s *Store) ReadLines(ctx context.Context, info *Info, start, end, maxBytes int64) (*Page, error) {
	x := s.indexFor(info)
	x.mu.Lock()
	defer x.mu.Unlock()
	start = max(start, 1)
	// Where line start begins: just after newline number start-1.
	from, ok, err := s.afterNewline(ctx, x, start-1)
	if err != nil {
		return nil, err
	}
	if !ok {
		// Fewer lines than start: nothing selected. EOF when the range
		// reaches past the last line, which it does unless end is set
		// and below the line count.
		lines := int64(1)
		if n := len(x.chunks); n > 0 {
			lines += x.chunks[n-1].nlBefore + x.chunks[n-1].nl
		}
		return &Page{Offset: info.Size, End: info.Size, EOF: end == 0 || end >= lines}, nil
	}
	// Where line end stops: at newline number end, or the end of the body.
	to, more := info.Size, false
	if end > 0 && end >= start {
		p, found, err := s.afterNewline(ctx, x, end)
		if err != nil {
			return nil, err
		}
		if found {
			to, more = p-1, true
		}
	} else if end > 0 {
		// end < start: the reference selects nothing; EOF iff end reaches
		// the last line, which it cannot when line start exists.
		return &Page{Offset: from, End: from, EOF: false}, nil
	}
	capped := to-from > maxBytes
	stop := to
	if capped {
		stop = from + max(maxBytes, 0)
	}
	buf, err := s.rangeBytes(ctx, x, from, min(to, stop+utf8.UTFMax))
	if err != nil {
		return nil, err
	}
	n := stop - from
	for n > 0 && from+n < info.Size && int(n) < len(buf) && !utf8.RuneStart(buf[n]) {
		n--
	}
	return &Page{Content: buf[:n], Offset: from, End: from + n, EOF: !more && !capped}, nil
}

// afterNewline returns the offset just past the n-th newline of the body
// (0 for n = 0) and whether the body has n newlines.
func (s *Store) afterNewline(ctx context.Context, x *index, n int64) (int64, bool, error) {
	if n == 0 {
		return 0, true, nil
	}
	// Discover until the chunks seen hold n newlines.
	for len(x.chunks) == 0 || x.chunks[len(x.chunks)-1].nlBefore+x.chunks[len(x.chunks)-1].nl < n {
		if _, err := s.discover(ctx, x); err != nil {
			if errors.Is(err, io.EOF) {
				return 0, false, nil
			}
			return 0, false, err
		}
	}
	k := sort.Search(len(x.chunks), func(i int) bool { return x.chunks[i].nlBefore+x.chunks[i].nl >= n })
	data, err := s.chunkData(ctx, x, k)
	if err != nil {
		return 0, false, err
	}
	need := n - x.chunks[k].nlBefore
	for i, b := range data {
		if b == '\n' {
			need--
			if need == 0 {
				return x.chunks[k].off + int64(i) + 1, true, nil
			}
		}
	}
	return 0, false, errIncomplete
}

// Clear removes every object of run (REF-T11) and returns how many.
func (s *Store) Clear(ctx context.Context, run contracts.RunKey) (int, error) {
	objs, err := s.list(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	prefix := contracts.SpillRunPrefix(run)
	for _, o := range objs {
		if strings.HasPrefix(o.Name, prefix) {
			if err := s.obs.Delete(ctx, o.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				return n, fmt.Errorf("spillstore: clear %s: %w", o.Name, err)
			}
			n++
		}
	}
	return n, nil
}

// Sweep removes the runs whose newest object is older than ttl (REF-T11)
// and returns how many runs and objects it removed.
func (s *Store) Sweep(ctx context.Context, ttl time.Duration) (runs, objects int, err error) {
	objs, err := s.list(ctx)
	if err != nil {
		return 0, 0, err
	}
	newest := map[string]time.Time{}
	byRun := map[string][]string{}
	for _, o := range objs {
		run, _, _ := strings.Cut(o.Name, "/")
		if o.ModTime.After(newest[run]) {
			newest[run] = o.ModTime
		}
		byRun[run] = append(byRun[run], o.Name)
	}
	cutoff := time.Now().Add(-ttl)
	for run, t := range newest {
		if !t.Before(cutoff) {
			continue
		}
		for _, name := range byRun[run] {
			if err := s.obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				return runs, objects, fmt.Errorf("spillstore: sweep %s: %w", name, err)
			}
			objects++
		}
		runs++
	}
	return runs, objects, nil
}

func (s *Store) list(ctx context.Context) ([]*jetstream.ObjectInfo, error) {
	objs, err := s.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("spillstore: list: %w", err)
	}
	return objs, nil
}

// IsIncomplete reports whether err means a stored object lacks chunks.
func IsIncomplete(err error) bool { return errors.Is(err, errIncomplete) }
