package offheap

import (
	"runtime/debug"
	"sync"
)

// The process's memory as the Go runtime's soft limit must see it: the
// runtime counts only its own memory, so the buffers mapped here are
// taken off the limit Within was given, as they are mapped and unmapped.
var (
	limitMu     sync.Mutex
	mappedTotal int64 // by every pool
	processMax  int64 // Within's total; 0: the runtime's limit is left alone
)

// Within keeps the Go runtime's soft memory limit (GOMEMLIMIT) at total
// less what pools have mapped, so that the collector works harder before
// the process as a whole, buffers and all, outgrows total. It never sets
// the limit below half of total: a heap that needs more than that is
// collected hard, not starved.
func Within(total int64) {
	limitMu.Lock()
	defer limitMu.Unlock()
	processMax = total
	applyLimit()
}

// mappedChanged adds delta to what pools have mapped.
func mappedChanged(delta int64) {
	limitMu.Lock()
	defer limitMu.Unlock()
	mappedTotal += delta
	applyLimit()
}

// applyLimit sets the runtime's limit from the totals; limitMu is held,
// so that two changes cannot apply their limits out of order.
func applyLimit() {
	if processMax <= 0 {
		return
	}
	debug.SetMemoryLimit(max(processMax-mappedTotal, processMax/2))
}

// GoLimit is the Go runtime's soft memory limit now (math.MaxInt64: none).
func GoLimit() int64 { return debug.SetMemoryLimit(-1) }
