// Package mounts is every privileged system call of the node plugin, and
// the mount table it reads: mounting /dev/fuse for a mounter, bind
// mounts, unmounting, aborting a hung FUSE connection, the kernel's
// readahead of a mount, and a statfs that a hung mount cannot block.
// Mounter is the interface the node plugin uses; System makes the calls
// (Linux), Fake keeps a mount table in memory, for tests that need no
// root and no FUSE daemon, as k8s.io/mount-utils does.
package mounts

import (
	"errors"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"
)

// FSType is the filesystem type objfuse mounts show in mountinfo.
const FSType = "fuse.objfuse"

// ErrHung marks a FUSE mount that did not answer in time.
var ErrHung = errors.New("mount does not answer (hung)")

// Mounter makes the node plugin's mounts and reads them.
type Mounter interface {
	// MountFUSE opens /dev/fuse and mounts it at mountpoint as FSType
	// with source (e.g. "objfuse:bucket/prefix"). The returned handle
	// goes to the mounter, which serves it without any privilege; the
	// caller closes it once the mounter has it.
	MountFUSE(mountpoint, source string, readOnly bool) (fd int, err error)
	// Bind mounts src at dst, read-only if asked.
	Bind(src, dst string, readOnly bool) error
	// UnmountAll removes every mount stacked at path; a busy or dead one
	// is detached lazily, and "not mounted" is success.
	UnmountAll(path string) error
	// Abort aborts the FUSE connection of mount m, so that its waiters
	// get ECONNABORTED and the mount can be replaced.
	Abort(m mount.MountInfo) error
	// TuneReadahead sets the kernel readahead of the FUSE mount at
	// mountpoint to kib, once its daemon has answered INIT.
	TuneReadahead(mountpoint string, kib int) error
	// DisablePoll tells the kernel that the FUSE mount at mountpoint
	// does not poll, once its daemon serves (see System.DisablePoll).
	DisablePoll(mountpoint string) error
	// List is the mount table, never a stat on a FUSE path (which could
	// hang on a dead daemon).
	List() ([]mount.MountInfo, error)
	// Statfs statfs()es path within timeout: ErrHung if it does not
	// answer, ENOTCONN (IsDead) if its daemon is gone.
	Statfs(path string, timeout time.Duration) (unix.Statfs_t, error)
	// Connection is the FUSE connection fd is a handle of (one MountFUSE
	// returned, or a duplicate): its number, the device minor that
	// mountinfo shows for its mounts, or UnknownConnection where the
	// kernel does not tell. An error wrapping ErrNoConnection says fd is
	// not the handle of a live connection: another file, a handle never
	// mounted, or a connection that ended (aborted, or unmounted).
	Connection(fd int) (int, error)
}

// UnknownConnection is what Connection answers for a live FUSE handle
// whose connection the kernel does not name.
const UnknownConnection = -1

// ErrNoConnection marks a handle that holds no live FUSE connection.
var ErrNoConnection = errors.New("not the handle of a live FUSE connection")

// At is the topmost mount at path in infos, if any.
func At(infos []mount.MountInfo, path string) (mount.MountInfo, bool) {
	var found mount.MountInfo
	ok := false
	for _, m := range infos {
		if m.MountPoint == path {
			found, ok = m, true // later entries are mounted on top
		}
	}
	return found, ok
}

// Mounted is the topmost mount at path, if any.
func Mounted(m Mounter, path string) (mount.MountInfo, bool, error) {
	infos, err := m.List()
	if err != nil {
		return mount.MountInfo{}, false, err
	}
	info, ok := At(infos, path)
	return info, ok, nil
}

// IsDead says whether err means the FUSE daemon behind a mount is gone.
func IsDead(err error) bool {
	return errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) || mount.IsCorruptedMnt(err)
}
