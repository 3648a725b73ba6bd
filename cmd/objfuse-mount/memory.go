package main

import (
	"os"
	"runtime/debug"

	"github.com/objfuse/objfuse/fusefs/limits"
)

// processMemory is what the whole process may take, buffers mapped
// outside the Go heap included: GOMEMLIMIT when it is set (a mounter
// pod's share of its limit), else the budget and the runtime's margin
// beside it; 0 when neither says.
func processMemory(budget int64) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1) // the runtime has read it
	}
	if budget > 0 {
		return budget + limits.RuntimeReserve
	}
	return 0
}
