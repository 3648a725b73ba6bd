package mounts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"
)

// System makes the calls, on Linux: it needs CAP_SYS_ADMIN (the node
// plugin runs privileged).
type System struct{}

var _ Mounter = System{}

func (System) List() ([]mount.MountInfo, error) {
	return mount.ParseMountInfo("/proc/self/mountinfo")
}

// Bind makes a bind mount read-only by remounting it.
func (System) Bind(src, dst string, readOnly bool) error {
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

func (s System) UnmountAll(path string) error {
	for range 16 {
		_, ok, err := Mounted(s, path)
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

// Abort writes to the connection's abort file in the FUSE control
// filesystem, mounting that first where the host has not.
func (System) Abort(m mount.MountInfo) error {
	const fusectl = "/sys/fs/fuse/connections"
	path := filepath.Join(fusectl, fmt.Sprint(m.Minor), "abort")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := unix.Mount("fusectl", fusectl, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount fusectl at %s: %w", fusectl, err)
		}
	}
	if err := os.WriteFile(path, []byte("1"), 0); err != nil {
		return fmt.Errorf("abort FUSE connection %d: %w", m.Minor, err)
	}
	return nil
}

// statfsRunning are the statfs calls still running, one per path at most:
// a hung mount blocks its call (and an OS thread) until it is aborted,
// and asking again would only pile up threads.
var statfsRunning sync.Map // path → chan struct{}, closed when the call returns

// Statfs: a dead FUSE connection answers ENOTCONN at once; a hung one
// never answers, and its call stays blocked until the connection is
// aborted.
func (System) Statfs(path string, timeout time.Duration) (unix.Statfs_t, error) {
	type result struct {
		st  unix.Statfs_t
		err error
	}
	running := make(chan struct{})
	if prev, loaded := statfsRunning.LoadOrStore(path, running); loaded {
		select {
		case <-prev.(chan struct{}):
			statfsRunning.Store(path, running)
		default:
			return unix.Statfs_t{}, fmt.Errorf("statfs %s: %w", path, ErrHung)
		}
	}
	ch := make(chan result, 1)
	go func() {
		var st unix.Statfs_t
		err := unix.Statfs(path, &st)
		close(running)
		statfsRunning.CompareAndDelete(path, running)
		ch <- result{st, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return r.st, &os.PathError{Op: "statfs", Path: path, Err: r.err}
		}
		return r.st, nil
	case <-time.After(timeout):
		return unix.Statfs_t{}, fmt.Errorf("statfs %s: %w", path, ErrHung)
	}
}
