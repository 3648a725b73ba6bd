package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
)

// DefaultDrainTimeout bounds the uploads still pending at exit, and
// those NodeUnstage waits for.
const DefaultDrainTimeout = 5 * time.Minute

// Mount mounts the volume at mountpoint and serves it until SIGINT or
// SIGTERM (then it uploads what is pending, unmounts and returns nil) or
// until someone unmounts it. ready is called once the mount serves, with
// nil, or with the error that stopped it.
func Mount(ctx context.Context, cfg Config, mountpoint string, ready func(error)) error {
	f, err := cfg.Open(ctx)
	if err != nil {
		ready(err)
		return err
	}
	defer f.Close()
	srv, err := f.Mount(mountpoint, cfg.Source(), os.Geteuid() == 0)
	if err != nil {
		ready(err)
		return err
	}
	if err := srv.WaitMount(); err != nil {
		ready(err)
		return err
	}
	if os.Geteuid() == 0 {
		// Only root can; the mounter pod's node plugin does it there.
		kib := cfg.ReadaheadKiB
		if kib == 0 {
			kib = mounts.ReadaheadKiB
		}
		if err := (mounts.System{}).TuneReadahead(mountpoint, kib); err != nil {
			cfg.Logger.Warn("kernel readahead left at its default; sequential reads will be slower", "err", err)
		}
	}
	if cfg.MetricsAddr != "" {
		stop, err := serveMetrics(cfg.MetricsAddr, func() *fusefs.FS { return f }, cfg.Source())
		if err != nil {
			srv.Unmount()
			ready(fmt.Errorf("metrics: %w", err))
			return err
		}
		defer stop()
	}
	cfg.Logger.Info("serving", "source", cfg.Source(), "mountpoint", mountpoint)
	ready(nil)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case <-done:
		cfg.Logger.Info("unmounted from outside; exiting", "mountpoint", mountpoint)
		return nil
	case sig := <-sigs:
		cfg.Logger.Info("signal; uploading pending writes and unmounting", "signal", sig.String())
	case <-ctx.Done():
	}
	deadline := time.Now().Add(cfg.drainTimeout())
	f.StopBy(deadline)
	fctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	flushErr := f.Flush(fctx)
	if err := unmount(srv, mountpoint); err != nil {
		return errors.Join(flushErr, err)
	}
	// After a lazy unmount the connection lives on while files stay open
	// in it; everything is uploaded, so exiting (which ends it) is safe.
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	return flushErr
}

// unmount unmounts, detaching lazily if a process still holds it busy, so
// that exit never leaves a dead mount behind.
func unmount(srv *fuse.Server, mountpoint string) error {
	var err error
	for range 10 {
		if err = srv.Unmount(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if os.Geteuid() == 0 {
		if derr := syscall.Unmount(mountpoint, syscall.MNT_DETACH); derr == nil {
			return nil
		}
	}
	return fmt.Errorf("unmount %s: %w", mountpoint, err)
}
