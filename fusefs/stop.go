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
	// stopped ends, with ErrStopped as its cause, at the stop deadline.
	stopped context.Context
	stop    context.CancelCauseFunc
	mu      sync.Mutex
	// deadline is when stopped ends; zero until StopBy.
	deadline time.Time
	timer    *time.Timer
}

func (s *stopState) init() {
	s.stopped, s.stop = context.WithCancelCause(context.Background())
}

// StopBy readies the filesystem for its process's end at deadline (a
// pod's grace period): from now on close(2) waits for its upload even
// with AsyncClose, since a close acknowledged now could not be uploaded
// after the process is gone; and at deadline every upload still running
// (uploads after earlier asynchronous closes, retrying an endpoint that
// does not answer) fails with ErrStopped, and is reported in Health as
// lost, rather than vanishing with the process unannounced. The mount
// keeps serving meanwhile. A later call can only bring the deadline
// forward.
func (f *FS) StopBy(deadline time.Time) {
	s := &f.stopping
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.deadline.IsZero() && !deadline.Before(s.deadline) {
		return
	}
	s.deadline = deadline
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = time.AfterFunc(time.Until(deadline), func() { s.stop(ErrStopped) })
}

// StopDeadline is StopBy's deadline, and false before StopBy.
func (f *FS) StopDeadline() (time.Time, bool) {
	s := &f.stopping
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline, !s.deadline.IsZero()
}

// asyncClose reports whether close(2) may return before its upload.
func (f *FS) asyncClose() bool {
	_, stopping := f.StopDeadline()
	return f.opts.AsyncClose && !stopping
}

// uploadContext is what an upload runs under: deaf to FUSE interrupts (a
// write already acknowledged must still reach S3) but keeping ctx's
// deadline, if any, and ended by the stop deadline. The error of an
// upload it ended says so.
func (f *FS) uploadContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancelDeadline := uninterruptibleUntilDeadline(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(f.stopping.stopped, func() { cancel(ErrStopped) })
	return ctx, func() {
		stop()
		cancel(nil)
		cancelDeadline()
	}
}

// stoppedError names ErrStopped as the reason of err when the stop
// deadline ended ctx: a canceled request says only "context canceled".
func stoppedError(ctx context.Context, err error) error {
	if err == nil || !errors.Is(context.Cause(ctx), ErrStopped) || errors.Is(err, ErrStopped) {
		return err
	}
	return fmt.Errorf("%v: %w", err, ErrStopped)
}
