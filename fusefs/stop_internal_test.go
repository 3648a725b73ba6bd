package fusefs

import (
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// The stop deadline has passed as soon as the clock says so, before its
// timer runs: an upload failing at the deadline (the drain's flush, whose
// context ends at the same instant) is then given up and reported lost
// with the stop as its reason, not left for a later try that would
// report it lost for another reason (TestHandoffSignalDuringAnOutage).
func TestTheStopDeadlinePassesByTheClock(t *testing.T) {
	f, err := New(memstore.New(), Options{StagingDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.stopPassed() {
		t.Fatal("the stop passed before StopBy")
	}
	f.StopBy(time.Now().Add(time.Hour))
	if f.stopPassed() {
		t.Fatal("the stop passed an hour before its deadline")
	}
	f.StopBy(time.Now().Add(-time.Millisecond))
	if !f.stopPassed() {
		t.Fatal("a deadline already past has not passed")
	}
}
