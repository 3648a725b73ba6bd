package s3store

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
)

// An answer is older news than any to a request sent after it, whenever
// each came: a success of a request sent before a failing one does not
// clear the failure, one sent after does; a failure of a request sent
// before a success does not bring a problem back.
func TestHealthOrdersAnswersBySending(t *testing.T) {
	var h health
	refused := fmt.Errorf("keys refused: %w", store.ErrAccess)
	before := time.Now()
	h.failed(refused, time.Now())
	h.worked(before)
	if h.get().Problem == nil {
		t.Fatal("a success of a request sent before the failure cleared it")
	}
	h.worked(time.Now())
	if p := h.get().Problem; p != nil {
		t.Fatalf("a success of a request sent after the failure left %v", p)
	}
	h.failed(refused, before)
	if p := h.get().Problem; p != nil {
		t.Fatalf("a failure of a request sent before a success brought back %v", p)
	}
}

// A slow probe: its request went out before a request that worked, its
// failure came before that success did. The success still ends the
// problem (CI once saw a deleted and re-made bucket reported as
// missing after a PUT into it worked).
func TestHealthSlowProbeFailureYieldsToLaterSuccess(t *testing.T) {
	var h health
	gone := fmt.Errorf("bucket gone: %w", store.ErrNoBucket)
	h.failed(gone, time.Now())
	probeSent := time.Now()
	putSent := time.Now()
	h.failed(gone, probeSent) // the probe's answer, noted first
	h.worked(putSent)
	if p := h.get().Problem; p != nil {
		t.Fatalf("a success of a request sent after the probe left %v", p)
	}
}

// Failures and successes noted at once from many goroutines end as the
// latest sent says: here the successes were all sent last.
func TestHealthRacingAnswersEndAsTheLatestSent(t *testing.T) {
	gone := fmt.Errorf("bucket gone: %w", store.ErrNoBucket)
	for range 200 {
		var h health
		failSent := time.Now()
		workSent := time.Now()
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				if i%2 == 0 {
					h.failed(gone, failSent)
				} else {
					h.worked(workSent)
				}
			})
		}
		wg.Wait()
		if p := h.get().Problem; p != nil {
			t.Fatalf("successes sent last left %v", p)
		}
	}
}
