package fusefs

import (
	"errors"
	"syscall"
	"testing"
)

// The last RELEASE reports a failed upload of content closed
// asynchronously as a loss, unless a writer's close or fsync returned the
// failure and nothing was written since.
func TestUploadStateReportsALossNoWriterHeardOf(t *testing.T) {
	for _, c := range []struct {
		name           string
		steps          func(u *uploadState)
		wantReport     bool
		wantOwedByNext bool
	}{
		{"closed asynchronously", func(u *uploadState) { u.written(); u.closedAsync() }, true, true},
		{"told at close", func(u *uploadState) { u.written(); u.answered(syscall.EIO) }, false, false},
		{"told, closed asynchronously", func(u *uploadState) { u.written(); u.closedAsync(); u.answered(syscall.EIO) }, false, true},
		{"told, then written", func(u *uploadState) { u.written(); u.answered(syscall.EIO); u.written() }, true, false},
		{"closed, answered without failure", func(u *uploadState) { u.written(); u.answered(0) }, true, false},
		{"restored from the journal", func(u *uploadState) { u.restored() }, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var u uploadState
			c.steps(&u)
			closedAsync := u.lastRelease()
			if closedAsync != c.wantOwedByNext {
				t.Errorf("closed asynchronously = %v, want %v", closedAsync, c.wantOwedByNext)
			}
			if got := u.tellLoss(); got != c.wantReport {
				t.Errorf("loss reported = %v, want %v", got, c.wantReport)
			}
			if u.tellLoss() {
				t.Error("a loss reported twice")
			}
		})
	}
}

func TestUploadStateFailures(t *testing.T) {
	var u uploadState
	first, second := errors.New("first"), errors.New("second")
	u.lose(first)
	u.lose(second)
	if u.lostTo() != first {
		t.Errorf("lost to %v, want the first failure", u.lostTo())
	}
	u.lastClosed()
	if u.lostTo() != nil {
		t.Errorf("lost to %v after the last close, want nil", u.lostTo())
	}
	u.owe(second)
	if u.takeOwed() != second || u.takeOwed() != nil {
		t.Error("an owed failure is not returned exactly once")
	}
	u.written()
	u.closedAsync()
	if !u.pending() || !u.awaitsAsyncUpload() {
		t.Error("written and closed asynchronously: not pending")
	}
	u.settled()
	if u.pending() || u.awaitsAsyncUpload() || u.tellLoss() {
		t.Error("settled content still pending or reportable")
	}
}
