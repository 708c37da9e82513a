package dispatcher

import (
	"sync"
	"time"
)

// refusalLog decides when a refused request is worth a log line: the
// first one, then at most one a minute, each saying how many were refused
// since the last. Anyone who may publish can send requests the dispatcher
// refuses, and a line per request would let them grow the logs at will.
type refusalLog struct {
	mu     sync.Mutex
	last   time.Time
	since  int
	logged bool
}

// refusalLogEvery is how often refusals are logged at most.
const refusalLogEvery = time.Minute

// note counts a refusal at now and reports whether to log one, with the
// number of refusals since the last line (this one included).
func (r *refusalLog) note(now time.Time) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.since++
	if r.logged && now.Sub(r.last) < refusalLogEvery {
		return 0, false
	}
	n := r.since
	r.since, r.last, r.logged = 0, now, true
	return n, true
}
