package s3store

import (
	"fmt"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
)

// An answer is older news than what was noted after its request went
// out: a success of a request sent before a failure does not clear it,
// one sent after does; a probe's failure does not undo a success noted
// since the probe went out.
func TestHealthOrdersAnswersBySending(t *testing.T) {
	var h health
	refused := fmt.Errorf("keys refused: %w", store.ErrAccess)
	before := time.Now()
	h.failed(refused)
	h.worked(before)
	if h.get().Problem == nil {
		t.Fatal("a success of a request sent before the failure cleared it")
	}
	h.worked(time.Now())
	if p := h.get().Problem; p != nil {
		t.Fatalf("a success of a request sent after the failure left %v", p)
	}
	probeSent := before
	if !h.workedSince(probeSent) {
		t.Fatal("a success noted after the probe went out is not seen")
	}
	if h.workedSince(time.Now()) {
		t.Fatal("a success is seen after a time that came later")
	}
}
