package mounts

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ReadaheadKiB is the kernel readahead objfuse mounts get: one READ of the
// largest size objfuse asks for (1016 KiB: a spliced reply and its header
// must fit a 1 MiB pipe). The kernel gives every FUSE mount 128 KiB
// whatever the daemon answers at INIT, so a sequential read arrives as
// eight times as many requests as it needs; measured on a 1 GiB cold
// read, 1 MiB windows cut the daemon's CPU by a quarter and raised
// throughput by a fifth. Larger windows were no faster; a window that is
// not a whole number of READs adds a small READ to each.
const ReadaheadKiB = 1016

// TuneReadahead (see Mounter; objfuse uses ReadaheadKiB) needs root, or a
// writable /sys, and must run after the daemon answered INIT: the kernel
// applies the daemon's INIT answer on top of it.
func (System) TuneReadahead(mountpoint string, kib int) error {
	p, err := readaheadFile(mountpoint)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p, []byte(strconv.Itoa(kib)), 0); err != nil {
		return fmt.Errorf("readahead of %s: %w", mountpoint, err)
	}
	return nil
}

// Readahead is the kernel readahead of the mount at mountpoint, in KiB.
func Readahead(mountpoint string) (int, error) {
	p, err := readaheadFile(mountpoint)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("readahead of %s: %w", mountpoint, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// readaheadFile is the sysfs file holding the readahead of the mount at
// mountpoint: its backing device's, found in /proc/self/mountinfo rather
// than with a stat, which would block on a mount that does not answer.
func readaheadFile(mountpoint string) (string, error) {
	mountpoint, err := filepath.Abs(mountpoint)
	if err != nil {
		return "", fmt.Errorf("readahead of %s: %w", mountpoint, err)
	}
	infos, err := System{}.List()
	if err != nil {
		return "", fmt.Errorf("readahead of %s: %w", mountpoint, err)
	}
	m, found := At(infos, mountpoint)
	if !found {
		return "", fmt.Errorf("readahead of %s: not mounted", mountpoint)
	}
	return fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", m.Major, m.Minor), nil
}

// DisablePoll polls go-fuse's magic file on the mount, which go-fuse
// answers ENOSYS, so that the kernel stops asking: go-fuse does this for
// mounts it makes itself and cannot for a handle served from /dev/fd/N.
// Without it, every file a Go program opens on the mount (Go adds each to
// its epoll set) sends the daemon a FUSE_POLL, and one whose answer the
// kernel lost left the program in epoll_ctl, holding its epoll set's lock.
func (System) DisablePoll(mountpoint string) error {
	fd, err := unix.Open(filepath.Join(mountpoint, ".go-fuse-epoll-hack"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("disable poll on %s: %w", mountpoint, err)
	}
	defer unix.Close(fd)
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	return nil
}
