package localserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/minio/minio-go/v7"
)

// StrangerKeys are keys no test server knows: a server that refuses them
// as unknown has loaded its users (see WaitServing).
const (
	StrangerAccessKey = "objfuse-readiness-stranger"
	StrangerSecretKey = "objfuse-readiness-stranger-secret"
)

// ErrExited: the server exited while it was waited for (a port taken
// meanwhile by another process, among other causes).
var ErrExited = errors.New("the server exited during start-up")

// pollInterval is how often WaitServing asks again.
const pollInterval = 50 * time.Millisecond

// WaitServing polls until the server answers signed requests as a ready
// one does, or exited closes, or ctx ends. A health endpoint says "ready"
// earlier than that: MinIO's answers 200 while its IAM subsystem is still
// loading, and a request then fails with "IAM sub-system not initialized
// yet" where a ready server would refuse the keys or answer. So two
// things are asked: root (a client with the server's own keys) lists the
// buckets, and stranger (a client with StrangerKeys) is refused as a
// client's mistake (4xx: MinIO's InvalidAccessKeyId, versitygw's
// XAdminUserNotFound), which a server can say only once it knows its users;
// MinIO's XMinioIAMNotInitialized is a 503.
func WaitServing(ctx context.Context, root, stranger *minio.Client, exited <-chan struct{}) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var why error // the last answer that said "not yet"
	for {
		select {
		case <-exited:
			return ErrExited
		default:
		}
		err := serving(ctx, root, stranger)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil || why == nil {
			why = err
		}
		select {
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			return fmt.Errorf("not serving signed requests: %w", why)
		case <-tick.C:
		}
	}
}

// serving is nil when the server answers as a ready one does, else why not.
func serving(ctx context.Context, root, stranger *minio.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := root.ListBuckets(ctx); err != nil {
		return fmt.Errorf("list buckets with the root keys: %w", err)
	}
	_, err := stranger.ListBuckets(ctx)
	if err == nil {
		return errors.New("the server accepts keys it cannot know")
	}
	if status := minio.ToErrorResponse(err).StatusCode; status < 400 || status >= 500 {
		return fmt.Errorf("list buckets with unknown keys: %w (HTTP status %d), want them refused (4xx)", err, status)
	}
	return nil
}
