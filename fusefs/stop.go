package fusefs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrStopped is why an upload failed that was still running when its
// process was about to be stopped (StopBy's deadline).
var ErrStopped = errors.New("the mounter was told to stop (SIGTERM: its pod deleted or evicted) and its drain timeout passed before S3 accepted the upload")

// stopState is what StopBy changes: an FS that is to stop keeps serving,
// but acknowledges nothing it could not keep.
type stopState struct {
	mu sync.Mutex
	// deadline is StopBy's; zero before. passed is set when it passes.
	deadline time.Time
	passed   bool
	timer    *time.Timer
	// cut ends, with ErrStopped as its cause, at the deadline: the
	// uploads running then end with it. Uploads started later get a new
	// one: by then every close waits for its upload, so they cannot be
	// lost unannounced, and a mount still serving after its deadline
	// (released late, or a signal no kill follows) goes on working.
	cut    context.Context
	cutAll context.CancelCauseFunc
}

func (s *stopState) init() {
	s.cut, s.cutAll = context.WithCancelCause(context.Background())
}

// current is the context whose end cuts an upload starting now.
func (s *stopState) current() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut
}

// StopBy readies the filesystem for its process's end at deadline (a
// pod's grace period): from now on close(2) waits for its upload even
// with AsyncClose, since a close acknowledged now could not be uploaded
// after the process is gone; and at deadline the uploads still running
// (after earlier asynchronous closes, retrying an endpoint that does not
// answer) fail with ErrStopped and are reported in Health as lost, rather
// than vanishing with the process unannounced. The mount keeps serving.
// A later call can only bring the deadline forward, and none changes
// anything once it has passed.
func (f *FS) StopBy(deadline time.Time) {
	s := &f.stopping
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.passed || !s.deadline.IsZero() && !deadline.Before(s.deadline) {
		return
	}
	s.deadline = deadline
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = time.AfterFunc(time.Until(deadline), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.passed {
			return // an earlier deadline's timer, stopped too late
		}
		s.passed = true
		s.cutAll(ErrStopped)
		s.cut, s.cutAll = context.WithCancelCause(context.Background())
	})
}

// StopDeadline is StopBy's deadline, and false before StopBy.
func (f *FS) StopDeadline() (time.Time, bool) {
	s := &f.stopping
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline, !s.deadline.IsZero()
}

// stopPassed reports whether StopBy's deadline has passed: by the clock,
// not only once its timer ran, since an upload under a context with the
// same deadline (the drain's flush) may fail and ask first.
func (f *FS) stopPassed() bool {
	s := &f.stopping
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.passed || !s.deadline.IsZero() && !time.Now().Before(s.deadline)
}

// asyncClose reports whether close(2) may return before its upload.
func (f *FS) asyncClose() bool {
	_, stopping := f.StopDeadline()
	return f.opts.AsyncClose && !stopping
}

// uploadContext is what an upload runs under: deaf to FUSE interrupts (a
// write already acknowledged must still reach S3) but keeping ctx's
// deadline, if any, and ended by the stop deadline should it still run
// then. The error of an upload it ended says so.
func (f *FS) uploadContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancelDeadline := uninterruptibleUntilDeadline(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(f.stopping.current(), func() { cancel(ErrStopped) })
	return ctx, func() {
		stop()
		cancel(nil)
		cancelDeadline()
	}
}

// stoppedError names ErrStopped as the reason of err when the stop
// deadline ended ctx (a canceled request says only "context canceled"),
// also when ctx's own deadline, the same instant, came first.
func (f *FS) stoppedError(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ErrStopped) {
		return err
	}
	if errors.Is(context.Cause(ctx), ErrStopped) || f.stopPassed() {
		return fmt.Errorf("%v: %w", err, ErrStopped)
	}
	return err
}

// lateUploadTimeout bounds an upload no writer waits for that starts
// after the stop deadline: the process is about to be killed.
const lateUploadTimeout = 10 * time.Second

// backgroundUploadContext is for an upload no writer waits for (the last
// RELEASE after an asynchronous close): it retries an endpoint that does
// not answer for asyncUploadTimeout, or, once the filesystem is to stop,
// until the stop deadline (lateUploadTimeout when that has passed).
func (f *FS) backgroundUploadContext() (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(asyncUploadTimeout)
	if stop, stopping := f.StopDeadline(); stopping {
		deadline = time.Now().Add(lateUploadTimeout)
		if stop.After(deadline) {
			deadline = stop
		}
	}
	return context.WithDeadline(context.Background(), deadline)
}
