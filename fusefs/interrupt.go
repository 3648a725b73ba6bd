package fusefs

import (
	"context"
	"sync"
	"time"
)

// interruptGrace is how long a request goes on after the kernel
// interrupted it (see patient).
const interruptGrace = 2 * time.Second

type patientKey struct{}

// patient is ctx, cancelled only interruptGrace after the kernel
// interrupts the request. The kernel interrupts a request whenever its
// caller gets a signal, also one the caller handles and returns from (a
// profiler's SIGPROF, a timer, a Go program's preemption); giving up then
// fails the system call with EINTR, which programs do not expect from
// stat, unlink or getdents on a filesystem. A request still running that
// long after is one against an endpoint that does not answer: it ends
// then, so that a caller being killed is let go (once a request is sent,
// the kernel waits for its answer even after SIGKILL).
//
// The grace is the request's, not each call's: READDIRPLUS looks up
// every entry under one request's ctx, and a grace each would hold a
// killed `ls -l` for seconds per entry. A ctx already patient is
// returned as it is.
func (f *FS) patient(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Value(patientKey{}) != nil {
		return ctx, func() {}
	}
	out, cancel := context.WithCancel(context.WithValue(context.WithoutCancel(ctx), patientKey{}, true))
	// The grace's timer outlives a request answered meanwhile; it then
	// cancels what is already cancelled.
	grace := f.opts.waits.interruptGrace
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(time.Until(graceEnd(ctx, grace)), cancel) })
	return out, func() {
		stop()
		cancel()
	}
}

// graces are the interrupted requests' contexts and when their grace
// ends, kept a little longer than the grace.
var graces sync.Map

// graceEnd is when the grace of request ctx, interrupted, ends: its
// first caller's now plus grace.
func graceEnd(ctx context.Context, grace time.Duration) time.Time {
	v, known := graces.LoadOrStore(ctx, time.Now().Add(grace))
	if !known {
		time.AfterFunc(2*grace, func() { graces.Delete(ctx) })
	}
	return v.(time.Time)
}

// uninterruptible keeps an upload going when the system call that started
// it is interrupted: the kernel then cancels the FUSE request's context
// (a Go program's preemption signals do that routinely), and an upload
// cut short would fail close(2) with EIO and lose the file. The upload's
// own retries and timeouts still bound it.
func uninterruptible(ctx context.Context) context.Context {
	return context.WithoutCancel(ctx)
}

// asyncUploadTimeout bounds an upload no writer waits for (after an
// asynchronous close), retries of an endpoint that does not answer
// included.
const asyncUploadTimeout = 5 * time.Minute

// uninterruptibleUntilDeadline is uninterruptible but keeps ctx's
// deadline, if any: the upload after an asynchronous close, and a drain,
// are bounded by one, and retry an endpoint that does not answer until
// then (a FUSE request's context has none).
func uninterruptibleUntilDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return uninterruptible(ctx), func() {}
	}
	return context.WithDeadline(uninterruptible(ctx), deadline)
}
