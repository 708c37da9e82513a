package taint

import (
	"encoding"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Ledger defaults and limits (REF-F2, F5).
const (
	// DefaultMinSpanLength is the length, in normalised characters, of the
	// shortest untrusted output the ledger tracks and of the window a probe
	// compares.
	DefaultMinSpanLength = 20
	// DefaultMaxChars bounds the normalised untrusted text a ledger keeps.
	DefaultMaxChars = 262144
	// MinWindow is the floor under MinSpanLength: a window shorter than 8
	// characters matches too much ordinary text to mean anything, so a
	// probe never matches with one.
	MinWindow = 8
	// MaxSnapshotTiles bounds Snapshot.SpanTileHashes.
	MaxSnapshotTiles = 8192
)

// ResumedUntrusted is the source kind of a match against the tile hashes a
// ledger was restored with (REF-F5): the text was seen before a suspend, so
// which tool produced it is no longer known.
const ResumedUntrusted = "resumed-untrusted"

// LedgerConfig sizes a Ledger. Its zero value gives the reference defaults.
type LedgerConfig struct {
	// MinSpanLength is the probe window and the shortest tracked output,
	// in normalised characters. Zero means DefaultMinSpanLength; any value
	// under MinWindow, negative ones included, becomes MinWindow, so that
	// lowering it always makes detection more sensitive, never switches it
	// off.
	MinSpanLength int
	// MaxChars bounds the tracked normalised text; beyond it the oldest
	// outputs are dropped whole. Zero means DefaultMaxChars; a value under
	// the (resolved) MinSpanLength, negative ones included, becomes
	// MinSpanLength.
	MaxChars int
}

// resolve returns the effective minimum span length and character budget.
func (c LedgerConfig) resolve() (minSpan, maxChars int) {
	minSpan = c.MinSpanLength
	if minSpan == 0 {
		minSpan = DefaultMinSpanLength
	}
	minSpan = max(minSpan, MinWindow)
	maxChars = c.MaxChars
	if maxChars == 0 {
		maxChars = DefaultMaxChars
	}
	return minSpan, max(maxChars, minSpan)
}

// span is one tracked untrusted output, normalised, and the call that
// produced it (empty when recorded without one, or restored from a
// version 1 encoding).
type span struct {
	text   string
	runes  int
	kind   string
	origin Origin
}

// Origin names the tool call whose output a ledger recorded, so that a
// match can say where an argument's text came from (Provenance).
type Origin struct {
	Tool   string
	CallID string
}

// Ledger is the taint state of one run (REF-F2): which kinds of taint the
// model has seen, and the untrusted text itself, so that a sink call's
// arguments can be checked for untrusted text carried into them verbatim.
//
// Text is compared in a normalised form: NFKC, letters and digits only,
// case-folded. That folds away case, whitespace, punctuation, zero-width
// characters and fullwidth or other compatibility forms, so inserting them
// does not hide a copy; it does not catch paraphrase, or look-alike letters
// of another script (a Cyrillic "а" stays apart from a Latin "a").
//
// Lengths are counted in Unicode code points; the reference counts UTF-16
// code units, which differs only outside the Basic Multilingual Plane.
//
// The zero Ledger is ready to use, with the default LedgerConfig. A Ledger
// is not safe for concurrent use: callers lock.
type Ledger struct {
	minSpan, maxChars int // zero until first use

	untrustedSeen bool
	sensitiveSeen bool
	kinds         map[string]struct{}

	spans   []span // oldest first
	tracked int    // sum of spans[i].runes

	// tiles are the span tile hashes the ledger was restored with, in
	// their snapshot order, and as a set.
	tiles   []uint32
	tileSet map[uint32]struct{}
}

// NewLedger returns an empty ledger sized by cfg.
func NewLedger(cfg LedgerConfig) *Ledger {
	l := &Ledger{}
	l.minSpan, l.maxChars = cfg.resolve()
	return l
}

// RestoreLedger returns a ledger that continues a run from a snapshot taken
// before a suspend (REF-F5): the seen flags and source kinds are restored,
// and the tile hashes re-arm Probe for text seen before the suspend. A
// match against them reports resumed, with the source kind
// ResumedUntrusted.
//
// Tiles are MinSpanLength characters long, cut end to end, so after a
// resume a copy is caught when it is at least 2*MinSpanLength-1 characters
// long; text recorded after the resume is caught at MinSpanLength as usual.
// The tiles only match when cfg resolves to the MinSpanLength they were cut
// with. At most MaxSnapshotTiles distinct hashes are kept.
func RestoreLedger(cfg LedgerConfig, s Snapshot) *Ledger {
	l := NewLedger(cfg)
	l.untrustedSeen = s.UntrustedSeen
	l.sensitiveSeen = s.SensitiveSeen
	for _, k := range s.UntrustedSourceKinds {
		l.addKind(k)
	}
	for _, h := range s.SpanTileHashes {
		if len(l.tiles) == MaxSnapshotTiles {
			break
		}
		l.addTile(h)
	}
	return l
}

func (l *Ledger) init() {
	if l.minSpan == 0 {
		l.minSpan, l.maxChars = LedgerConfig{}.resolve()
	}
}

func (l *Ledger) addKind(k string) {
	if l.kinds == nil {
		l.kinds = make(map[string]struct{})
	}
	l.kinds[k] = struct{}{}
}

func (l *Ledger) addTile(h uint32) {
	if l.tileSet == nil {
		l.tileSet = make(map[uint32]struct{})
	}
	if _, ok := l.tileSet[h]; ok {
		return
	}
	l.tileSet[h] = struct{}{}
	l.tiles = append(l.tiles, h)
}

// Record notes one output the model saw, under its label. Call it for every
// output, trusted ones included: a sensitive output sets SensitiveSeen, and
// an untrusted one sets UntrustedSeen and adds its source kind (an empty
// one counts as UnknownSourceKind).
//
// The text of an untrusted output is tracked when it is at least
// MinSpanLength characters long once normalised; one longer than MaxChars
// is cut to its first MaxChars characters. When the tracked text exceeds
// MaxChars, the oldest outputs are dropped, whole, until it fits. The seen
// flags and source kinds are never dropped.
func (l *Ledger) Record(text string, label Label) { l.RecordFrom(text, label, Origin{}) }

// RecordFrom is Record for an output of a known call: the ledger keeps its
// origin with its text, and Provenance names it.
func (l *Ledger) RecordFrom(text string, label Label, origin Origin) {
	l.init()
	if label.Sensitive {
		l.sensitiveSeen = true
	}
	if !label.Untrusted {
		return
	}
	l.untrustedSeen = true
	kind := label.SourceKind
	if kind == "" {
		kind = UnknownSourceKind
	}
	l.addKind(kind)

	t, n := normalizeText(text)
	if n < l.minSpan {
		return
	}
	if n > l.maxChars {
		t, n = prefixRunes(t, l.maxChars), l.maxChars
	}
	l.spans = append(l.spans, span{text: t, runes: n, kind: kind, origin: origin})
	l.tracked += n
	for l.tracked > l.maxChars && len(l.spans) > 1 {
		l.tracked -= l.spans[0].runes
		l.spans[0] = span{}
		l.spans = l.spans[1:]
	}
}

// UntrustedSeen reports whether an untrusted output has been recorded (or
// restored). It never resets: it is the load-bearing signal of the strict
// derived and lethal-trifecta checks.
func (l *Ledger) UntrustedSeen() bool { return l.untrustedSeen }

// SensitiveSeen reports whether a sensitive output has been recorded (or
// restored). It never resets.
func (l *Ledger) SensitiveSeen() bool { return l.sensitiveSeen }

// UntrustedSourceKinds returns the source kinds of the untrusted outputs
// recorded (or restored), sorted, each once.
func (l *Ledger) UntrustedSourceKinds() []string {
	out := make([]string, 0, len(l.kinds))
	for k := range l.kinds {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Probe reports whether argsJSON, the JSON text of a sink call's arguments,
// carries tracked untrusted text verbatim (REF-F2). Both are normalised;
// the arguments match when a window of min(MinSpanLength, length) of their
// normalised characters occurs in a tracked output. Arguments shorter than
// MinWindow once normalised never match.
//
// The arguments are tried twice, as given and with their JSON string
// escapes decoded, and match when either does: "\n" or "\u00e9" inside a
// string would otherwise add letters that break every window across them.
//
// resumed is true when the match came only from the tile hashes of
// RestoreLedger; those are tried only when no tracked output matches, and
// only when the arguments are at least MinSpanLength characters long.
func (l *Ledger) Probe(argsJSON string) (match bool, resumed bool) {
	kinds := l.probe(argsJSON, false)
	if len(kinds) == 0 {
		return false, false
	}
	return true, kinds[0] == ResumedUntrusted
}

// probe returns the source kinds of the tracked outputs that argsJSON
// carries, sorted, or {ResumedUntrusted} for a match on restored tiles
// alone, or nil. With all false it stops at the first match.
func (l *Ledger) probe(argsJSON string, all bool) []string {
	l.init()
	if len(l.spans) == 0 && len(l.tiles) == 0 {
		return nil
	}
	forms := argForms(argsJSON)
	var short []string // forms under MinSpanLength: one window each
	var long []string  // forms with windows of MinSpanLength
	for _, f := range forms {
		switch n := utf8.RuneCountInString(f); {
		case n < MinWindow:
		case n < l.minSpan:
			short = append(short, f)
		default:
			long = append(long, f)
		}
	}
	if len(short) == 0 && len(long) == 0 {
		return nil
	}

	var matched []string
	if len(l.spans) > 0 {
		var ws *windowSet
		if len(long) > 0 {
			ws = newWindowSet(long, l.minSpan)
		}
		for i := len(l.spans) - 1; i >= 0; i-- { // newest first
			sp := &l.spans[i]
			if slices.Contains(matched, sp.kind) {
				continue
			}
			hit := false
			for _, f := range short {
				if strings.Contains(sp.text, f) {
					hit = true
					break
				}
			}
			if !hit && ws != nil {
				hit = ws.scan(sp.text)
			}
			if hit {
				matched = append(matched, sp.kind)
				if !all {
					return matched
				}
			}
		}
	}
	if len(matched) > 0 {
		slices.Sort(matched)
		return matched
	}
	if len(l.tiles) > 0 {
		for _, f := range long {
			if l.tileHit(f) {
				return []string{ResumedUntrusted}
			}
		}
	}
	return nil
}

// tileHit reports whether a MinSpanLength window of f hashes to a restored
// tile.
func (l *Ledger) tileHit(f string) bool {
	ends := runeEnds(f)
	for i := 0; i+l.minSpan <= len(ends); i++ {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		if _, ok := l.tileSet[tileHash(f[start:ends[i+l.minSpan-1]])]; ok {
			return true
		}
	}
	return false
}

// Snapshot is the summary of a ledger that survives a suspend (REF-F5). It
// carries no untrusted text: tile hashes are one-way.
type Snapshot struct {
	// UntrustedSeen is Ledger.UntrustedSeen.
	UntrustedSeen bool `json:"untrustedSeen"`
	// SensitiveSeen is Ledger.SensitiveSeen.
	SensitiveSeen bool `json:"sensitiveSeen"`
	// UntrustedSourceKinds is Ledger.UntrustedSourceKinds.
	UntrustedSourceKinds []string `json:"untrustedSourceKinds"`
	// SpanTileHashes are the FNV-1a (32-bit) hashes of the tracked text,
	// cut into tiles of MinSpanLength characters end to end, at most
	// MaxSnapshotTiles of them. Each tile is hashed over its UTF-16 code
	// units, as the reference does; the reference writes each hash as 8
	// lower-case hex digits.
	SpanTileHashes []uint32 `json:"spanTileHashes"`
}

// Snapshot returns the ledger's summary for a resume. When the tiles exceed
// MaxSnapshotTiles, the newest text wins: tiles of the newest tracked
// output come first, then older outputs, then the tiles the ledger was
// itself restored with.
func (l *Ledger) Snapshot() Snapshot {
	l.init()
	s := Snapshot{
		UntrustedSeen:        l.untrustedSeen,
		SensitiveSeen:        l.sensitiveSeen,
		UntrustedSourceKinds: l.UntrustedSourceKinds(),
		SpanTileHashes:       []uint32{},
	}
	seen := make(map[uint32]struct{})
	add := func(h uint32) bool {
		if _, ok := seen[h]; !ok {
			seen[h] = struct{}{}
			s.SpanTileHashes = append(s.SpanTileHashes, h)
		}
		return len(s.SpanTileHashes) < MaxSnapshotTiles
	}
	for i := len(l.spans) - 1; i >= 0; i-- {
		t := l.spans[i].text
		start, n := 0, 0
		for j := range t {
			if n > 0 && n%l.minSpan == 0 {
				if !add(tileHash(t[start:j])) {
					return s
				}
				start = j
			}
			n++
		}
		if n%l.minSpan == 0 && !add(tileHash(t[start:])) {
			return s
		}
	}
	for _, h := range l.tiles {
		if !add(h) {
			return s
		}
	}
	return s
}

// The binary encoding of a ledger: magic, then uvarints and strings
// (uvarint length and bytes):
//
//	"GTL" 2
//	minSpan maxChars
//	flags (1 byte: 1 untrustedSeen, 2 sensitiveSeen)
//	count, kinds (strings, strictly increasing)
//	count, spans (kind string, text string, tool string, call id string; oldest first)
//	count, tiles (4 bytes little-endian each)
//
// Version 1, written before spans had an origin, has no tool and call id
// in its spans; it is still read (its spans have no origin).
var (
	ledgerMagic   = [4]byte{'G', 'T', 'L', 2}
	ledgerMagicV1 = [4]byte{'G', 'T', 'L', 1}
)

// The flags byte of the encoding.
const (
	flagUntrusted = 1 << iota
	flagSensitive
)

// maxLedgerChars is the largest MaxChars the decoder accepts.
const maxLedgerChars = 1 << 30

var (
	_ encoding.BinaryMarshaler   = (*Ledger)(nil)
	_ encoding.BinaryUnmarshaler = (*Ledger)(nil)
)

// ErrCorruptLedger is wrapped by every error of Ledger.UnmarshalBinary.
var ErrCorruptLedger = errors.New("taint: corrupt ledger encoding")

// MarshalBinary encodes the full state of the ledger, tracked text
// included, so that another process can continue the run with
// UnmarshalBinary. Unlike a Snapshot, the encoding holds untrusted text:
// store it only where the run's data may be stored.
func (l *Ledger) MarshalBinary() ([]byte, error) {
	l.init()
	size := 32 + 4*len(l.tiles)
	for k := range l.kinds {
		size += len(k) + binary.MaxVarintLen32
	}
	for _, sp := range l.spans {
		size += len(sp.kind) + len(sp.text) + len(sp.origin.Tool) + len(sp.origin.CallID) + 4*binary.MaxVarintLen32
	}
	b := make([]byte, 0, size)
	b = append(b, ledgerMagic[:]...)
	b = binary.AppendUvarint(b, uint64(l.minSpan))
	b = binary.AppendUvarint(b, uint64(l.maxChars))
	var flags byte
	if l.untrustedSeen {
		flags |= flagUntrusted
	}
	if l.sensitiveSeen {
		flags |= flagSensitive
	}
	b = append(b, flags)
	kinds := l.UntrustedSourceKinds()
	b = binary.AppendUvarint(b, uint64(len(kinds)))
	for _, k := range kinds {
		b = appendString(b, k)
	}
	b = binary.AppendUvarint(b, uint64(len(l.spans)))
	for _, sp := range l.spans {
		b = appendString(b, sp.kind)
		b = appendString(b, sp.text)
		b = appendString(b, sp.origin.Tool)
		b = appendString(b, sp.origin.CallID)
	}
	b = binary.AppendUvarint(b, uint64(len(l.tiles)))
	for _, h := range l.tiles {
		b = binary.LittleEndian.AppendUint32(b, h)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// UnmarshalBinary replaces the state of l with one encoded by MarshalBinary;
// l may be a zero Ledger. It checks the encoding and the ledger's
// invariants (sizes, budgets, normalised characters, source kinds, tile
// count) and, when they do not hold, returns an error wrapping
// ErrCorruptLedger and leaves l unchanged.
func (l *Ledger) UnmarshalBinary(b []byte) error {
	if len(b) < len(ledgerMagic) || ([4]byte(b[:4]) != ledgerMagic && [4]byte(b[:4]) != ledgerMagicV1) {
		return fmt.Errorf("%w: bad magic or version", ErrCorruptLedger)
	}
	v1 := [4]byte(b[:4]) == ledgerMagicV1
	d := ledgerDecoder{b: b[4:]}
	var nl Ledger
	minSpan, maxChars := d.uvarint(), d.uvarint()
	if d.err == nil && (minSpan < MinWindow || maxChars < minSpan || maxChars > maxLedgerChars) {
		return fmt.Errorf("%w: sizes %d/%d out of range", ErrCorruptLedger, minSpan, maxChars)
	}
	nl.minSpan, nl.maxChars = int(minSpan), int(maxChars)
	flags := d.byte()
	if flags&^(flagUntrusted|flagSensitive) != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrCorruptLedger, flags)
	}
	nl.untrustedSeen = flags&flagUntrusted != 0
	nl.sensitiveSeen = flags&flagSensitive != 0

	prev := ""
	for i, n := 0, d.count(1); i < n && d.err == nil; i++ {
		k := d.string()
		if i > 0 && k <= prev {
			return fmt.Errorf("%w: source kinds not sorted", ErrCorruptLedger)
		}
		prev = k
		nl.addKind(k)
	}
	if len(nl.kinds) > 0 && !nl.untrustedSeen {
		return fmt.Errorf("%w: source kinds without untrusted seen", ErrCorruptLedger)
	}

	perSpan := 4
	if v1 {
		perSpan = 2
	}
	for i, n := 0, d.count(perSpan); i < n && d.err == nil; i++ {
		kind, text := d.string(), d.string()
		var origin Origin
		if !v1 {
			origin.Tool, origin.CallID = d.string(), d.string()
		}
		if d.err != nil {
			break
		}
		if _, ok := nl.kinds[kind]; !ok {
			return fmt.Errorf("%w: span of unlisted source kind", ErrCorruptLedger)
		}
		runes, ok := normalizedRunes(text)
		if !ok {
			return fmt.Errorf("%w: span text not normalised", ErrCorruptLedger)
		}
		if runes < nl.minSpan || runes > nl.maxChars-nl.tracked {
			return fmt.Errorf("%w: span length out of range", ErrCorruptLedger)
		}
		nl.spans = append(nl.spans, span{text: text, runes: runes, kind: kind, origin: origin})
		nl.tracked += runes
	}

	n := d.count(4)
	if n > MaxSnapshotTiles {
		return fmt.Errorf("%w: %d tiles", ErrCorruptLedger, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		h := d.uint32()
		if _, dup := nl.tileSet[h]; dup {
			return fmt.Errorf("%w: duplicate tile", ErrCorruptLedger)
		}
		nl.addTile(h)
	}
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorruptLedger, len(d.b))
	}
	*l = nl
	return nil
}

// ledgerDecoder reads the ledger encoding; after the first error every
// read returns a zero value and err stays set.
type ledgerDecoder struct {
	b   []byte
	err error
}

func (d *ledgerDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated or invalid %s", ErrCorruptLedger, what)
	}
	d.b = nil
}

func (d *ledgerDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads an element count, each element taking at least min bytes.
func (d *ledgerDecoder) count(min int) int {
	v := d.uvarint()
	if v > uint64(len(d.b)/min) {
		d.fail("count")
		return 0
	}
	return int(v)
}

func (d *ledgerDecoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("flags")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *ledgerDecoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *ledgerDecoder) uint32() uint32 {
	if len(d.b) < 4 {
		d.fail("tile")
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

// normalizeText returns the comparison form of s and its length in runes:
// NFKC, then only letters and numbers, each case-folded (foldLetter).
func normalizeText(s string) (string, int) {
	s = norm.NFKC.String(s)
	var b strings.Builder
	b.Grow(len(s))
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			default:
				continue
			}
			b.WriteByte(c)
			n++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if unicode.IsLetter(r) || unicode.IsNumber(r) {
			b.WriteRune(foldLetter(r))
			n++
		}
	}
	return b.String(), n
}

// foldLetter maps a letter or number r to the lower case of the smallest
// letter or number of its simple case-folding orbit, so that two letters
// equal under case folding become equal. Plain lower-casing would keep
// apart, for example, the final sigma "ς" and "σ". Marks are skipped: the
// orbit of "Ι" holds the combining U+0345, which is not a letter.
func foldLetter(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		return r
	}
	lo := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < lo && (unicode.IsLetter(f) || unicode.IsNumber(f)) {
			lo = f
		}
	}
	return unicode.ToLower(lo)
}

// normalizedRunes reports whether s could be normalizeText output, and its
// length in runes. It checks the characters, not the NFKC step.
func normalizedRunes(s string) (int, bool) {
	n := 0
	for _, r := range s {
		if r < utf8.RuneSelf {
			if !('a' <= r && r <= 'z' || '0' <= r && r <= '9') {
				return 0, false
			}
			n++
			continue
		}
		if r == utf8.RuneError || !(unicode.IsLetter(r) || unicode.IsNumber(r)) || foldLetter(r) != r {
			return 0, false
		}
		n++
	}
	return n, true
}

// prefixRunes returns the first n runes of s.
func prefixRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// runeEnds returns, for each rune of s, the byte offset just past it.
func runeEnds(s string) []int {
	ends := make([]int, 0, len(s))
	for i, r := range s {
		ends = append(ends, i+utf8.RuneLen(r))
	}
	return ends
}

// argForms returns the normalised forms of a sink call's JSON arguments:
// the text as given and, when it has escapes, with its JSON string escapes
// decoded (when that gives a different form).
func argForms(argsJSON string) []string {
	raw, _ := normalizeText(argsJSON)
	decoded := decodeJSONEscapes(argsJSON)
	if decoded == argsJSON {
		return []string{raw}
	}
	dec, _ := normalizeText(decoded)
	if dec == raw {
		return []string{raw}
	}
	return []string{raw, dec}
}

// decodeJSONEscapes replaces the escape sequences of JSON strings in s by
// the characters they stand for. A control escape (\n, \t...) becomes a
// space, which normalisation drops anyway; a lone surrogate becomes U+FFFD;
// anything that is not a valid escape is kept as it is. It does not parse
// the JSON: a backslash can only occur inside a string of valid JSON, and
// invalid JSON gets a best effort.
func decodeJSONEscapes(s string) string {
	i := strings.IndexByte(s, '\\')
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for i < len(s) {
		j := strings.IndexByte(s[i:], '\\')
		if j < 0 {
			b.WriteString(s[i:])
			break
		}
		b.WriteString(s[i : i+j])
		i += j
		if i+1 >= len(s) {
			b.WriteByte('\\')
			break
		}
		switch e := s[i+1]; e {
		case '"', '\\', '/':
			b.WriteByte(e)
			i += 2
		case 'b', 'f', 'n', 'r', 't':
			b.WriteByte(' ')
			i += 2
		case 'u':
			r, ok := hex4(s[i+2:])
			if !ok {
				b.WriteByte('\\')
				i++
				continue
			}
			i += 6
			if utf16.IsSurrogate(r) {
				lo, ok := rune(0), false
				if strings.HasPrefix(s[i:], `\u`) {
					lo, ok = hex4(s[i+2:])
				}
				if c := utf16.DecodeRune(r, lo); ok && c != utf8.RuneError {
					r = c
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			b.WriteRune(r)
		default:
			b.WriteByte('\\')
			i++
		}
	}
	return b.String()
}

// hex4 parses the four hex digits at the start of s.
func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[:4]) {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// tileHash is the reference's fnv1a32: FNV-1a over the UTF-16 code units of
// s, one code unit (not one byte) per step.
func tileHash(s string) uint32 {
	const (
		offset = 0x811c9dc5
		prime  = 0x01000193
	)
	h := uint32(offset)
	for _, r := range s {
		if r < 0x10000 {
			h = (h ^ uint32(r)) * prime
			continue
		}
		r1, r2 := utf16.EncodeRune(r)
		h = (h ^ uint32(r1)) * prime
		h = (h ^ uint32(r2)) * prime
	}
	return h
}

// windowSet holds the distinct w-rune windows of the probed argument
// forms. scan looks for them in tracked text without hashing every window:
// a bitmap filter keyed by the first 8 bytes of each window (a window of 8
// or more runes has at least 8 bytes) lets it skip almost every position
// with one load and a multiply, and only a position that passes the filter
// costs a map lookup of the w runes that start there. The map compares whole
// windows, so there are no false matches, and the cost per position is
// bounded on adversarial text too.
type windowSet struct {
	w       int
	windows map[string]struct{}
	bits    []uint64
	shift   uint
}

func newWindowSet(forms []string, w int) *windowSet {
	total := 0
	for _, f := range forms {
		total += len(f)
	}
	size := 1 << 12 // bits in the filter: 64 per byte of the forms
	for size < 64*total && size < 1<<22 {
		size <<= 1
	}
	ws := &windowSet{
		w:       w,
		windows: make(map[string]struct{}, total),
		bits:    make([]uint64, size/64),
		shift:   uint(64 - bits.TrailingZeros(uint(size))),
	}
	for _, f := range forms {
		ends := runeEnds(f)
		for i := 0; i+w <= len(ends); i++ {
			start := 0
			if i > 0 {
				start = ends[i-1]
			}
			win := f[start:ends[i+w-1]]
			ws.windows[win] = struct{}{}
			k := ws.slot(load8(win, 0))
			ws.bits[k/64] |= 1 << (k % 64)
		}
	}
	return ws
}

func (ws *windowSet) slot(k uint64) uint64 { return (k * 0x9e3779b97f4a7c15) >> ws.shift }

// load8 returns the 8 bytes of s at i as a little-endian integer.
func load8(s string, i int) uint64 {
	b := s[i : i+8]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// scan reports whether any w-rune window of text is in the set.
func (ws *windowSet) scan(text string) bool {
	filter, shift := ws.bits, ws.shift&63
	for i := 0; i+8 <= len(text); i++ {
		k := (load8(text, i) * 0x9e3779b97f4a7c15) >> shift
		if filter[k/64]&(1<<(k%64)) == 0 {
			continue
		}
		if text[i]&0xc0 == 0x80 { // inside a rune: no window starts here
			continue
		}
		end, ok := runesEnd(text, i, ws.w)
		if !ok {
			return false // no window starts here or later
		}
		if _, hit := ws.windows[text[i:end]]; hit {
			return true
		}
	}
	return false
}

// runesEnd returns the byte offset just past the n runes of s that start at
// byte i, and false when s has fewer.
func runesEnd(s string, i, n int) (int, bool) {
	for ; n > 0; n-- {
		if i >= len(s) {
			return 0, false
		}
		if s[i] < utf8.RuneSelf {
			i++
		} else {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
		}
	}
	return i, true
}
