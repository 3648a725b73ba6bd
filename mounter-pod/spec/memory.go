package spec

import (
	"fmt"

	"github.com/objfuse/objfuse/fusefs/limits"
	"github.com/objfuse/objfuse/volume"
)

// A mounter pod's memory is shared three ways, within the GOMEMLIMIT it
// gets (nine tenths of its limit, see Template.Pod; the collector works
// ever harder past it): the Go runtime, the mounter's code and go-fuse's
// request buffers (limits.RuntimeReserve, the margin objfuse-mount itself
// leaves beside its budget); objfuse-mount's budget for written data,
// readahead and listings (--memory-limit-mib); and the inodes the kernel
// keeps looked up (--max-inodes), which objfuse-mount holds apart from
// that budget. The budget's part buffers are mapped outside the Go heap,
// where the runtime does not see them: objfuse-mount lowers the
// runtime's limit by what they map (offheap.Within), so that the three
// shares together stay within GOMEMLIMIT. Left to objfuse-mount's defaults, a mounter of the default
// 256Mi limit could hold 64 MiB of buffers and 100,000 inodes (100 to
// 200 MiB) beside its runtime: a find over a large bucket during a copy
// would take it past its limit.
const (
	// inodeKiB is what one kept inode is counted at: above the 0.7 to
	// 1.5 KiB fusefs's memory tests measure, with the kernel's lookups
	// and the GC's slack.
	inodeKiB = 2
	// minInodes is the least --max-inodes a mounter gets: a limit too
	// small for its budget still serves, looking names up again more
	// often.
	minInodes = 1000
)

// memoryFlags are the objfuse-mount flags that keep a mounter inside its
// pod's memory limit of limitMiB: the budget is the volume's
// memoryLimitMiB when it sets one, else objfuse-mount's default, but no
// more than half of what the runtime's share leaves of the GOMEMLIMIT
// (and no less than two parts); the inodes get the rest.
func memoryFlags(limitMiB int64, o volume.MountOptions) []string {
	usable := goMemLimit(limitMiB) - limits.RuntimeReserve>>20
	budget := o.Int(volume.ParamMemoryLimitMiB)
	var flags []string
	if _, set := o[volume.ParamMemoryLimitMiB]; !set {
		budget = max(min(budget, usable/2), 2*o.Int(volume.ParamPartSizeMiB), o.Min(volume.ParamMemoryLimitMiB))
		flags = append(flags, fmt.Sprintf("--memory-limit-mib=%d", budget))
	}
	inodes := max((usable-budget)<<10/inodeKiB, minInodes)
	return append(flags, fmt.Sprintf("--max-inodes=%d", inodes))
}

// goMemLimit is the Go runtime's soft memory limit a mounter pod of limit
// gets (GOMEMLIMIT), in limit's unit: the collector works harder from
// there on, before the kernel's OOM killer would act.
func goMemLimit(limit int64) int64 { return limit * 9 / 10 }
