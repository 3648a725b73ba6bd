package mounts

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"
)

// Fake keeps a mount table in memory and makes no system call but the
// pipe that stands for /dev/fuse: for tests of the node plugin's
// decisions without root or a FUSE daemon. A test sets how a mount
// answers with SetDead and SetHung.
//
// A connection's handles are the read end of its pipe, and the
// connection lives while the Fake holds the write end: until it is
// aborted, its last mount is unmounted, or SetDead. Connection then
// answers as the kernel does (poll sees the pipe hung up).
type Fake struct {
	mu     sync.Mutex
	table  []mount.MountInfo
	broken map[string]error // mountpoint → what Statfs answers
	minor  int
	conns  map[uint64]*fakeConn // pipe inode → connection
	// Calls records each change made, in order ("mount-fuse /p", "bind
	// /a /b", "unmount /p", "abort /p", "readahead /p 1016").
	Calls []string
}

var _ Mounter = (*Fake)(nil)

func (f *Fake) record(format string, args ...any) {
	f.Calls = append(f.Calls, fmt.Sprintf(format, args...))
}

// fakeConn is a connection of a Fake: its number and the write end of
// its pipe, nil once it ended.
type fakeConn struct {
	minor int
	w     *os.File
}

// MountFUSE's handle is the read end of a pipe.
func (f *Fake) MountFUSE(mountpoint, source string, readOnly bool) (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	fd, err := unix.FcntlInt(r.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	r.Close()
	if err != nil {
		w.Close()
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		w.Close()
		return -1, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.minor++
	if f.conns == nil {
		f.conns = map[uint64]*fakeConn{}
	}
	f.conns[st.Ino] = &fakeConn{minor: f.minor, w: w}
	f.table = append(f.table, mount.MountInfo{MountPoint: mountpoint, Source: source, FsType: FSType, Minor: f.minor})
	f.record("mount-fuse %s", mountpoint)
	return fd, nil
}

// Connection knows the handles MountFUSE returned, and their duplicates.
func (f *Fake) Connection(fd int) (int, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("handle %d: %w: %w", fd, ErrNoConnection, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.conns[st.Ino]
	if !ok || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return 0, fmt.Errorf("handle %d is no handle of this Fake: %w", fd, ErrNoConnection)
	}
	if c.w == nil {
		return 0, fmt.Errorf("handle %d: connection %d ended: %w", fd, c.minor, ErrNoConnection)
	}
	return c.minor, nil
}

// endLocked ends connection minor, if nothing mounts it or it is
// aborted (all).
func (f *Fake) endLocked(minor int, all bool) {
	if !all && slices.ContainsFunc(f.table, func(m mount.MountInfo) bool { return m.Minor == minor }) {
		return
	}
	for _, c := range f.conns {
		if c.minor == minor && c.w != nil {
			c.w.Close()
			c.w = nil
		}
	}
}

func (f *Fake) Bind(src, dst string, readOnly bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := At(f.table, src)
	if !ok {
		return fmt.Errorf("bind %s on %s: %w", src, dst, syscall.EINVAL)
	}
	m.MountPoint = dst
	f.table = append(f.table, m)
	f.record("bind %s %s", src, dst)
	return nil
}

func (f *Fake) UnmountAll(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var gone []int
	f.table = slices.DeleteFunc(f.table, func(m mount.MountInfo) bool {
		if m.MountPoint == path {
			gone = append(gone, m.Minor)
		}
		return m.MountPoint == path
	})
	for _, minor := range gone {
		f.endLocked(minor, false)
	}
	delete(f.broken, path)
	f.record("unmount %s", path)
	return nil
}

func (f *Fake) Abort(m mount.MountInfo) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, other := range f.table {
		if other.Minor == m.Minor {
			f.setLocked(other.MountPoint, syscall.ECONNABORTED)
		}
	}
	f.endLocked(m.Minor, true)
	f.record("abort %s", m.MountPoint)
	return nil
}

// DisablePoll has nothing to tell a fake mount (not recorded: it does not
// change what is mounted where).
func (f *Fake) DisablePoll(mountpoint string) error { return nil }

func (f *Fake) TuneReadahead(mountpoint string, kib int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("readahead %s %d", mountpoint, kib)
	return nil
}

func (f *Fake) List() ([]mount.MountInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.table), nil
}

// Statfs answers at once: what SetDead or SetHung said, else a small
// filesystem; a path nothing is mounted at is a plain directory.
func (f *Fake) Statfs(path string, timeout time.Duration) (unix.Statfs_t, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.broken[path]; err != nil {
		return unix.Statfs_t{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return unix.Statfs_t{Bsize: 4096, Blocks: 1 << 20, Bfree: 1 << 19, Bavail: 1 << 19, Files: 1000, Ffree: 500}, nil
}

// SetDead makes every mount of the connection at path answer as if its
// daemon had exited (ENOTCONN), with no one else holding a handle: the
// connection ends.
func (f *Fake) SetDead(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(path, syscall.ENOTCONN)
	if m, ok := At(f.table, path); ok {
		f.endLocked(m.Minor, true)
	}
}

// SetHung makes every mount of the connection at path not answer.
func (f *Fake) SetHung(path string) { f.set(path, ErrHung) }

func (f *Fake) set(path string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(path, err)
}

func (f *Fake) setLocked(path string, err error) {
	m, ok := At(f.table, path)
	if !ok {
		return
	}
	if f.broken == nil {
		f.broken = map[string]error{}
	}
	for _, other := range f.table {
		if other.Minor == m.Minor {
			f.broken[other.MountPoint] = err
		}
	}
}
