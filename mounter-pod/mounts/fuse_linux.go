package mounts

import (
	"fmt"
	"os"

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
