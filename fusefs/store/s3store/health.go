package s3store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
)

// health keeps the latest failure of the store's requests that a person
// must fix (refused credentials, a deleted bucket, an endpoint gone),
// until a request works again. A mount only shows such failures as
// EACCES or EIO to whoever happens to touch it; the mounter reports this
// to the node plugin, which tells the pods' owners.
type health struct {
	problem atomic.Pointer[store.Health]
	// cleared is the problem the latest success ended, and when. A
	// failure of its kind soon after continues it, keeping its start: a
	// policy that refuses only some requests, or an endpoint that answers
	// only some, is one problem, not one per request.
	cleared atomic.Pointer[clearedProblem]
	// lastProbe is when the store last asked S3 whether a problem is over
	// (UnixNano): an idle mount sends no request that could tell.
	lastProbe atomic.Int64
	// lastWorked and lastFailed are when the latest request that worked,
	// and the latest that failed, were sent (mono). An answer is older
	// news than any to a request sent after it, whenever each came: a
	// slow success must not clear a failure of a request sent since, nor
	// a slow probe's failure undo a success of a request sent since.
	lastWorked, lastFailed atomic.Int64
	// mu orders a failure against a success that ends a problem; a
	// success while there is none takes no lock.
	mu sync.Mutex
}

type clearedProblem struct {
	store.Health
	at time.Time
}

// sameProblemWithin is how soon after a success a failure of the same
// kind continues the problem it cleared.
const sameProblemWithin = time.Minute

// probeEvery is how often a store with a problem asks S3 whether it is
// over.
const probeEvery = 10 * time.Second

// worked is called for every response in the 2xx range to a request sent
// at sent: the credentials, the bucket and the endpoint all served it.
func (h *health) worked(sent time.Time) {
	at := int64(sent.Sub(monoBase))
	storeMax(&h.lastWorked, at)
	if h.problem.Load() == nil {
		return // a failure storing one now sees lastWorked after it does
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastFailed.Load() > at {
		return // a request sent after this one failed
	}
	if p := h.problem.Swap(nil); p != nil {
		h.cleared.Store(&clearedProblem{Health: *p, at: time.Now()})
	}
}

// failed notes err, already explained and reportable, of a request sent
// at sent.
func (h *health) failed(err error, sent time.Time) {
	at := int64(sent.Sub(monoBase))
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastWorked.Load() > at {
		return // a request sent after this one worked
	}
	storeMax(&h.lastFailed, at)
	since := time.Now()
	old := h.problem.Load()
	if old != nil && sameKind(old.Problem, err) {
		since = old.Since
	} else if c := h.cleared.Load(); c != nil && sameKind(c.Problem, err) && time.Since(c.at) < sameProblemWithin {
		since = c.Since
	}
	h.problem.Store(&store.Health{Problem: err, Since: since})
	// A success that took no lock, because there was no problem when it
	// looked, has stored its lastWorked before looking: seen here if it
	// did not see this problem.
	if h.lastWorked.Load() > at {
		h.problem.Store(old)
	}
}

// storeMax raises v to x, unless it is already later.
func storeMax(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if cur >= x || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

func (h *health) get() store.Health {
	if p := h.problem.Load(); p != nil {
		return *p
	}
	return store.Health{}
}

// dueForProbe says whether a probe should go now, and counts it as gone.
func (h *health) dueForProbe() bool {
	last := h.lastProbe.Load()
	now := time.Now().UnixNano()
	return time.Duration(now-last) >= probeEvery && h.lastProbe.CompareAndSwap(last, now)
}

var reportableKinds = []error{store.ErrAccess, store.ErrNoBucket, store.ErrUnavailable}

// reportable: a failure that is not the caller's (a missing key, a
// refused name, an interrupted call) nor one minio-go's retries got past.
func reportable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	for _, k := range reportableKinds {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

func sameKind(a, b error) bool {
	for _, k := range reportableKinds {
		if errors.Is(a, k) {
			return errors.Is(b, k)
		}
	}
	return false
}
