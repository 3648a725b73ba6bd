package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"
)

// mountInfo lists this process's mounts, from /proc/self/mountinfo: never
// a stat on a FUSE path, which could hang on a dead daemon.
func mountInfo() ([]mount.MountInfo, error) {
	return mount.ParseMountInfo("/proc/self/mountinfo")
}

// mountAt is the topmost mount at path, if any.
func mountAt(infos []mount.MountInfo, path string) (mount.MountInfo, bool) {
	var found mount.MountInfo
	ok := false
	for _, m := range infos {
		if m.MountPoint == path {
			found, ok = m, true // later entries are mounted on top
		}
	}
	return found, ok
}

func isMounted(path string) (mount.MountInfo, bool, error) {
	infos, err := mountInfo()
	if err != nil {
		return mount.MountInfo{}, false, err
	}
	m, ok := mountAt(infos, path)
	return m, ok, nil
}

// bindMount mounts src at dst, read-only if asked (a bind mount is made
// read-only by a remount).
func bindMount(src, dst string, readOnly bool) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	if readOnly {
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			unix.Unmount(dst, unix.MNT_DETACH)
			return fmt.Errorf("make %s read-only: %w", dst, err)
		}
	}
	return nil
}

// unmountAll removes every mount stacked at path. A busy or dead mount is
// detached lazily; "not mounted" is success.
func unmountAll(path string) error {
	for i := 0; i < 16; i++ {
		_, ok, err := isMounted(path)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		err = unix.Unmount(path, 0)
		if err == nil || errors.Is(err, unix.EINVAL) {
			continue
		}
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 16 unmounts", path)
}

// errHung marks a FUSE mount that did not answer in time.
var errHung = errors.New("mount does not answer (hung)")

// probes are the statfs calls still running, one per path at most: a
// hung mount blocks its call (and an OS thread) until it is aborted, and
// asking again would only pile up threads.
var probes sync.Map // path → chan struct{}, closed when the call returns

// probe statfs()es path with a deadline. A dead FUSE connection answers
// ENOTCONN at once; a hung one never answers, and its call stays blocked
// until the connection is aborted.
func probe(path string, timeout time.Duration) (unix.Statfs_t, error) {
	type result struct {
		st  unix.Statfs_t
		err error
	}
	running := make(chan struct{})
	if prev, loaded := probes.LoadOrStore(path, running); loaded {
		select {
		case <-prev.(chan struct{}):
			probes.Store(path, running)
		default:
			return unix.Statfs_t{}, fmt.Errorf("statfs %s: %w", path, errHung)
		}
	}
	ch := make(chan result, 1)
	go func() {
		var st unix.Statfs_t
		err := unix.Statfs(path, &st)
		close(running)
		probes.CompareAndDelete(path, running)
		ch <- result{st, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return r.st, &os.PathError{Op: "statfs", Path: path, Err: r.err}
		}
		return r.st, nil
	case <-time.After(timeout):
		return unix.Statfs_t{}, fmt.Errorf("statfs %s: %w", path, errHung)
	}
}

// isDead says whether err means the FUSE daemon behind a mount is gone.
func isDead(err error) bool {
	return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) || mount.IsCorruptedMnt(err)
}

// abortConnection aborts the FUSE connection of a hung mount, so that its
// waiters get ECONNABORTED and the mount can be replaced.
func abortConnection(m mount.MountInfo) error {
	const fusectl = "/sys/fs/fuse/connections"
	path := filepath.Join(fusectl, fmt.Sprint(m.Minor), "abort")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		// The control filesystem is not mounted on every host.
		if err := unix.Mount("fusectl", fusectl, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount fusectl at %s: %w", fusectl, err)
		}
	}
	if err := os.WriteFile(path, []byte("1"), 0); err != nil {
		return fmt.Errorf("abort FUSE connection %d: %w", m.Minor, err)
	}
	return nil
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, every time.Duration, cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(every):
		}
	}
}
