package mounts

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MountFUSE needs CAP_SYS_ADMIN (see Mounter).
func (System) MountFUSE(mountpoint, source string, readOnly bool) (fd int, err error) {
	fd, err = unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/fuse: %w", err)
	}
	st, err := os.Stat(mountpoint)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mountpoint: %w", err)
	}
	if !st.IsDir() {
		unix.Close(fd)
		return -1, fmt.Errorf("mountpoint %s is not a directory", mountpoint)
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	// default_permissions: the kernel enforces the files' modes and
	// owners, so uid, gid, fileMode, dirMode and a pod's fsGroup mean
	// what they say for every pod sharing the volume.
	data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions", fd)
	if err := unix.Mount(source, mountpoint, FSType, flags, data); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount %s at %s: %w", FSType, mountpoint, err)
	}
	return fd, nil
}

// The FUSE device, /dev/fuse: char 10:229 on every Linux.
const (
	fuseMajor = 10
	fuseMinor = 229
)

// Connection checks, without touching the connection's requests: fd is
// the FUSE device (fstat); it is attached to a connection that has not
// ended (poll: the kernel answers POLLERR for a handle never mounted and
// for an aborted or unmounted connection); and which connection that is,
// from the "fuse_connection:" line the kernel writes in the handle's
// fdinfo (Linux 6.18 does; older kernels may not, and the answer is then
// UnknownConnection). Nothing is read from or written to fd: a read would
// take a request from the daemon that serves it.
func (System) Connection(fd int) (int, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("handle %d: %w: %w", fd, ErrNoConnection, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != fuseMajor || unix.Minor(st.Rdev) != fuseMinor {
		return 0, fmt.Errorf("handle %d is not /dev/fuse (mode %o, device %d:%d): %w", fd, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), ErrNoConnection)
	}
	if err := pollAlive(fd); err != nil {
		return 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		return UnknownConnection, nil
	}
	return fdinfoConnection(string(b)), nil
}

// pollAlive says whether the handle fd's connection goes on: poll answers
// at once, with an error for a handle at its end.
func pollAlive(fd int) error {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLOUT}}
	for {
		_, err := unix.Poll(p, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll handle %d: %w", fd, err)
		}
		break
	}
	if p[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
		return fmt.Errorf("handle %d (poll %#x): %w", fd, p[0].Revents, ErrNoConnection)
	}
	return nil
}

// fdinfoConnection is the connection an fdinfo names, or
// UnknownConnection.
func fdinfoConnection(fdinfo string) int {
	for line := range strings.Lines(fdinfo) {
		if v, ok := strings.CutPrefix(line, "fuse_connection:"); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
				return n
			}
		}
	}
	return UnknownConnection
}
