package driver

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/objfuse/objfuse/mounter-pod/mounts"
)

// A check's decision: a mount that answers is healthy; a dead or missing
// one is repaired at once; a hung one whose mounter still serves is only
// slow; a hung and silent one is aborted on the hangsBeforeAbort-th
// check in a row, not before, and the count starts again after.
func TestDecideRepair(t *testing.T) {
	hung := fmt.Errorf("statfs /s: %w", mounts.ErrHung)
	dead := fmt.Errorf("statfs /s: %w", syscall.ENOTCONN)
	cases := []struct {
		name      string
		err       error
		hangs     int
		serving   bool
		want      repairStep
		wantHangs int
	}{
		{"answers", nil, 2, false, stepHealthy, 0},
		{"dead", dead, 2, false, stepRepair, 0},
		{"not mounted", fmt.Errorf("/s is not an objfuse mount"), 0, false, stepRepair, 0},
		{"hung, mounter serving", hung, 0, true, stepWaitSlow, 1},
		{"hung long, mounter serving", hung, hangsBeforeAbort + 5, true, stepWaitSlow, hangsBeforeAbort + 6},
		{"hung, silent, first check", hung, 0, false, stepWaitSilent, 1},
		{"hung, silent, one check short", hung, hangsBeforeAbort - 2, false, stepWaitSilent, hangsBeforeAbort - 1},
		{"hung, silent, enough checks", hung, hangsBeforeAbort - 1, false, stepAbortAndRepair, 0},
	}
	for _, tc := range cases {
		step, hangs := decideRepair(tc.err, tc.hangs, tc.serving)
		if step != tc.want || hangs != tc.wantHangs {
			t.Errorf("%s: step %d with %d hung checks, want %d with %d", tc.name, step, hangs, tc.want, tc.wantHangs)
		}
	}
}
