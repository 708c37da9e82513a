package dispatcher

import (
	"container/list"
	"sync"
)

// ledgerCache keeps the taint ledgers this dispatcher last wrote or read,
// encoded, with their bucket revisions, least recently used first out,
// within a byte budget. It only saves a read: a write with a stale
// revision fails and the ledger is read from the bucket, which stays the
// truth; the gate never decides from the cache.
type ledgerCache struct {
	mu    sync.Mutex
	max   int // bytes
	bytes int
	order *list.List               // of *cachedLedger, most recent first
	byRun map[string]*list.Element // run id -> element
}

type cachedLedger struct {
	run string
	b   []byte
	rev uint64
}

// ledgerCacheBytes bounds the cache: a run's ledger is at most 262,144
// characters and its tiles, most are a few kilobytes.
const ledgerCacheBytes = 32 << 20

func (c *ledgerCache) get(run string) ([]byte, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byRun == nil {
		return nil, 0, false
	}
	el, ok := c.byRun[run]
	if !ok {
		return nil, 0, false
	}
	c.order.MoveToFront(el)
	e := el.Value.(*cachedLedger)
	return e.b, e.rev, true
}

func (c *ledgerCache) put(run string, b []byte, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byRun == nil {
		c.byRun, c.order = map[string]*list.Element{}, list.New()
		if c.max == 0 {
			c.max = ledgerCacheBytes
		}
	}
	if el, ok := c.byRun[run]; ok {
		e := el.Value.(*cachedLedger)
		if rev < e.rev {
			return // an older read arriving late
		}
		c.bytes += len(b) - len(e.b)
		e.b, e.rev = b, rev
		c.order.MoveToFront(el)
	} else {
		c.byRun[run] = c.order.PushFront(&cachedLedger{run: run, b: b, rev: rev})
		c.bytes += len(b)
	}
	for c.bytes > c.max && c.order.Len() > 1 {
		last := c.order.Back()
		e := last.Value.(*cachedLedger)
		c.order.Remove(last)
		delete(c.byRun, e.run)
		c.bytes -= len(e.b)
	}
}
