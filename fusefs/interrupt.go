package fusefs

import (
	"context"
	"time"
)

// interruptGrace is how long a request goes on after the kernel
// interrupted it (see patient).
const interruptGrace = 2 * time.Second

// patient is ctx, cancelled only interruptGrace after the kernel
// interrupts the request. The kernel interrupts a request whenever its
// caller gets a signal, also one the caller handles and returns from (a
// profiler's SIGPROF, a timer, a Go program's preemption); giving up then
// fails the system call with EINTR, which programs do not expect from
// stat, unlink or getdents on a filesystem. A request still running that
// long after is one against an endpoint that does not answer: it ends
// then, so that a caller being killed is let go (once a request is sent,
// the kernel waits for its answer even after SIGKILL).
func patient(ctx context.Context) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(interruptGrace, cancel) })
	return out, func() {
		stop()
		cancel()
	}
}
