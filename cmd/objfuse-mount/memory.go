package main

import (
	"math"
	"os"

	"github.com/objfuse/objfuse/fusefs/limits"
	"github.com/objfuse/objfuse/fusefs/offheap"
)

// processMemory is what the whole process may take, buffers mapped
// outside the Go heap included: GOMEMLIMIT when it is set (a mounter
// pod's share of its limit), else the budget and the runtime's margin
// beside it; 0 when neither says (or GOMEMLIMIT=off).
func processMemory(budget int64) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		if l := offheap.GoLimit(); l != math.MaxInt64 {
			return l // the runtime has read it
		}
		return 0
	}
	if budget > 0 {
		return budget + limits.RuntimeReserve
	}
	return 0
}
