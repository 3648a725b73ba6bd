package handoff

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// FSType is the filesystem type objfuse mounts show in mountinfo.
const FSType = "fuse.objfuse"

// MountFUSE opens /dev/fuse and mounts it at mountpoint as FSType with
// source (e.g. "objfuse:bucket/prefix"). It needs CAP_SYS_ADMIN; the
// returned handle goes to the mounter, which serves it without any
// privilege. The caller closes fd once the mounter has it.
func MountFUSE(mountpoint, source string, readOnly bool) (fd int, err error) {
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
