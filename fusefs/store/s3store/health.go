package s3store

import (
	"context"
	"errors"
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
	// lastWorked and lastFailed are when a success and a failure were
	// last noted (mono). A request's answer is older news than one
	// noted after the request was sent: a slow success must not clear a
	// failure seen since, nor a slow probe's failure undo a success.
	lastWorked, lastFailed atomic.Int64
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
	if h.lastFailed.Load() > int64(sent.Sub(monoBase)) {
		return // a failure was noted since this request went out
	}
	h.lastWorked.Store(mono())
	if p := h.problem.Load(); p != nil && h.problem.CompareAndSwap(p, nil) {
		h.cleared.Store(&clearedProblem{Health: *p, at: time.Now()})
	}
}

// workedSince reports whether a success was noted after t.
func (h *health) workedSince(t time.Time) bool {
	return h.lastWorked.Load() > int64(t.Sub(monoBase))
}

// failed notes err, already explained and reportable.
func (h *health) failed(err error) {
	h.lastFailed.Store(mono())
	since := time.Now()
	if old := h.problem.Load(); old != nil && sameKind(old.Problem, err) {
		since = old.Since
	} else if c := h.cleared.Load(); c != nil && sameKind(c.Problem, err) && time.Since(c.at) < sameProblemWithin {
		since = c.Since
	}
	h.problem.Store(&store.Health{Problem: err, Since: since})
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
