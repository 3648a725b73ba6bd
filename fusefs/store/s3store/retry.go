package s3store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
)

// maxRetryDelay caps the wait between tries of an upload.
const maxRetryDelay = 15 * time.Second

// untilDeadline tries an upload request again, waiting longer each time,
// while it fails because the endpoint does not answer (a restart, a
// network partition, 503 SlowDown) and ctx's deadline leaves room. The
// caller chooses by giving a deadline: the upload after an asynchronous
// close, which no writer waits for and which would otherwise be lost
// after minio-go's own retries (seconds), and the drain before a mounter
// lets its mount go. A close(2) that waits for its upload has none: its
// writer gets EIO and may try again. Each try is cut once its requests
// move no byte for the store's StallTimeout (see watchProgress), which
// bounds a close(2) on an endpoint that stopped reading.
func (s *Store) untilDeadline(ctx context.Context, try func(context.Context) error) error {
	delay := time.Second
	start := time.Now()
	for tries := 1; ; tries++ {
		err := s.tryWatched(ctx, try)
		if err == nil || !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		deadline, ok := ctx.Deadline()
		if !ok || time.Until(deadline) < delay {
			if tries > 1 {
				return fmt.Errorf("%d tries over %v: %w", tries, time.Since(start).Round(time.Second), err)
			}
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// tryWatched makes one try under a watch of its progress; a try the
// watch cut fails as an endpoint that does not answer.
func (s *Store) tryWatched(ctx context.Context, try func(context.Context) error) error {
	tctx, done := watchProgress(ctx, s.stallTimeout())
	defer done()
	err := try(tctx)
	if err != nil && stalled(tctx) && ctx.Err() == nil {
		err = fmt.Errorf("S3 endpoint %s stalled: no byte of the request or its answer moved for %v, or no answer began %v after the request was sent: %w",
			s.client.EndpointURL(), s.stallTimeout(), answerWaits*s.stallTimeout(), store.ErrUnavailable)
		s.health.failed(err, time.Now())
	}
	return err
}

func (s *Store) stallTimeout() time.Duration {
	if s.cfg.StallTimeout > 0 {
		return s.cfg.StallTimeout
	}
	return DefaultStallTimeout
}
