// Package serve runs objfuse-mount: the FUSE daemon that serves one
// bucket or prefix, either on a mountpoint it mounts itself (by hand, like
// s3fs) or on a FUSE handle handed over by the node plugin (in the
// mounter pod).
package serve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
)

// Config is everything objfuse-mount needs to serve a volume.
type Config struct {
	Bucket string
	Prefix string
	S3     s3store.Config
	FS     fusefs.Options
	// MetricsAddr serves Prometheus /metrics when set (host:port).
	MetricsAddr string
	// ReadaheadKiB is the kernel readahead of a mount made here as root
	// (0: mounts.ReadaheadKiB). In a mounter pod the node plugin sets it.
	ReadaheadKiB int
	// CheckTimeout bounds the start-up check of endpoint, credentials and bucket.
	CheckTimeout time.Duration
	// DrainTimeout bounds uploads after SIGTERM or SIGINT. A mounter pod
	// gets its grace period less a margin; what is not uploaded by then
	// is reported lost rather than killed with the process.
	DrainTimeout time.Duration
	// Takeover, in a mounter pod, serves the FUSE handle so that a
	// successor can take the connection over when this process dies
	// (package fusefs/takeover), journaling in StateDir.
	Takeover bool
	// ExitWhenReleased makes Handoff exit once the node plugin releases
	// the mount (an inline volume's mounter: its pod is done with it, and
	// the controller deletes a mounter that exited), instead of waiting
	// for the volume to be staged again.
	ExitWhenReleased bool
	Logger           *slog.Logger
}

func (c Config) drainTimeout() time.Duration {
	if c.DrainTimeout <= 0 {
		return DefaultDrainTimeout
	}
	return c.DrainTimeout
}

// ParseSource splits "bucket[/prefix]".
func ParseSource(src string) (bucket, prefix string, err error) {
	bucket, prefix, _ = strings.Cut(strings.Trim(src, "/"), "/")
	if bucket == "" {
		return "", "", fmt.Errorf("no bucket in %q: want BUCKET[/PREFIX]", src)
	}
	if prefix != "" {
		prefix += "/"
	}
	return bucket, prefix, nil
}

// Source is the mount's source as mountinfo shows it.
func (c Config) Source() string {
	return "objfuse:" + c.Bucket + "/" + strings.TrimSuffix(c.Prefix, "/")
}

// Open checks the endpoint, credentials and bucket and builds the
// filesystem. Its error is one line a user can act on.
func (c Config) Open(ctx context.Context) (*fusefs.FS, error) {
	if c.S3.Observe == nil {
		c.S3.Observe = observeRequest
	}
	if c.S3.Logger == nil {
		c.S3.Logger = c.Logger
	}
	st, err := s3store.New(c.S3, c.Bucket)
	if err != nil {
		return nil, err
	}
	timeout := c.CheckTimeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := st.Check(cctx); err != nil {
		return nil, err
	}
	opts := c.FS
	opts.Prefix = c.Prefix
	opts.Logger = c.Logger
	if opts.Capacity > 0 && opts.CapacitySource == nil {
		opts.CapacitySource = c.recordedCapacity(st)
	}
	if opts.JournalDir == "" {
		opts.JournalDir = filepath.Join(opts.WithDefaults().StagingDir, "objfuse-journal-"+c.volumeHash())
	}
	return fusefs.New(st, opts)
}

// volumeHash names what a mount keeps on its staging directory after
// what it serves: the journal of files closed asynchronously, and the
// state a successor takes the connection over with. A mount started again
// on the same staging directory finds what its predecessor left, and
// mounts of other buckets beside it keep to their own.
func (c Config) volumeHash() string {
	sum := sha256.Sum256([]byte(c.S3.Endpoint + "\n" + c.Bucket + "\n" + c.Prefix))
	return hex.EncodeToString(sum[:8])
}

// StateDir is where a mounter keeps what a successor needs to take its
// FUSE connection over: on the staging volume (the mounter pod's
// emptyDir), which outlives a restart of its container.
func (c Config) StateDir() string {
	return filepath.Join(c.FS.WithDefaults().StagingDir, "objfuse-state-"+c.volumeHash())
}
