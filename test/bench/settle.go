package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Settling: a measurement starts only once the machine is quiet. A write
// row leaves MinIO deleting a GiB and ext4 discarding it; whatever ran
// next (raw client or filesystem) ran measurably slower, which made
// ratios depend on the rotation more than on the code.
const (
	settleWindow   = 500 * time.Millisecond
	settleDeadline = 20 * time.Second
	// A window is quiet when the CPUs were at least this idle and tasks
	// stalled on I/O for at most this share of it.
	settleIdle    = 0.85
	settleIOStall = 0.05
)

// settled counts how long measurements waited for quiet, and how often
// the deadline ran out first, for the table's notes.
var settled struct {
	waits    int
	total    time.Duration
	timedOut int
}

// settle waits, up to settleDeadline, for a window of settleWindow in
// which the machine was idle.
func settle() {
	t0 := time.Now()
	deadline := t0.Add(settleDeadline)
	idle0, all0 := cpuTimes()
	stall0 := ioStallMicros()
	for {
		time.Sleep(settleWindow) // the length of the window being measured, not a wait for an event
		idle1, all1 := cpuTimes()
		stall1 := ioStallMicros()
		idle := 1.0
		if all1 > all0 {
			idle = float64(idle1-idle0) / float64(all1-all0)
		}
		stall := float64(stall1-stall0) / float64(settleWindow.Microseconds())
		if idle >= settleIdle && stall <= settleIOStall {
			break
		}
		if time.Now().After(deadline) {
			settled.timedOut++
			break
		}
		idle0, all0, stall0 = idle1, all1, stall1
	}
	settled.waits++
	settled.total += time.Since(t0)
}

// settleNote describes the waits for the table's notes.
func settleNote() string {
	if settled.waits == 0 {
		return ""
	}
	s := fmt.Sprintf("each measurement waited for a quiet %v (CPUs ≥ %.0f%% idle, I/O stall ≤ %.0f%%): %.1f s on average",
		settleWindow, settleIdle*100, settleIOStall*100, settled.total.Seconds()/float64(settled.waits))
	if settled.timedOut > 0 {
		s += fmt.Sprintf("; %d of %d waits gave up after %v (figures of a busy machine)", settled.timedOut, settled.waits, settleDeadline)
	}
	return s
}

// cpuTimes returns the idle (idle plus iowait) and total jiffies of all
// CPUs from /proc/stat.
func cpuTimes() (idle, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0
	}
	for i, s := range f[1:] {
		v, _ := strconv.ParseUint(s, 10, 64)
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return idle, total
}

// ioStallMicros is the total time some task stalled on I/O
// (/proc/pressure/io, "some"), or 0 where PSI is not available.
func ioStallMicros() uint64 {
	b, err := os.ReadFile("/proc/pressure/io")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	_, v, ok := strings.Cut(line, "total=")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	return n
}
