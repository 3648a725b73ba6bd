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
}

// worked is called for every response in the 2xx range: the credentials,
// the bucket and the endpoint all served it.
func (h *health) worked() {
	if h.problem.Load() != nil {
		h.problem.Store(nil)
	}
}

// failed notes err, already explained, when it is one to report.
func (h *health) failed(err error) {
	if !reportable(err) {
		return
	}
	since := time.Now()
	if old := h.problem.Load(); old != nil && sameKind(old.Problem, err) {
		since = old.Since
	}
	h.problem.Store(&store.Health{Problem: err, Since: since})
}

func (h *health) get() store.Health {
	if p := h.problem.Load(); p != nil {
		return *p
	}
	return store.Health{}
}

var reportableKinds = []error{store.ErrAccess, store.ErrNoBucket, store.ErrUnavailable}

// reportable: a failure that is not the caller's (a missing key, a
// refused name, an interrupted call) nor a retry's (minio-go retries a
// 5xx or a dropped connection before its error gets here).
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
