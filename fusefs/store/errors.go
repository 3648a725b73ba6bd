package store

import (
	"context"
	"errors"
	"syscall"
)

// Errors every Store maps its failures onto, so that the filesystem can
// turn them into errno values deliberately instead of guessing.
var (
	ErrNotExist    = errors.New("object does not exist")
	ErrNoBucket    = errors.New("bucket does not exist")
	ErrAccess      = errors.New("access denied")
	ErrUnavailable = errors.New("object store unavailable")
	ErrInvalid     = errors.New("invalid request")
	// ErrChanged: the object is no longer the version a request was
	// conditional on (S3's 412 PreconditionFailed).
	ErrChanged = errors.New("object changed: it is no longer the version that was opened")
	// ErrTooLarge: more than S3 takes in one object.
	ErrTooLarge = errors.New("object too large")
)

// Errno maps a Store error to the errno the filesystem returns for it.
// Anything unrecognised is EIO: an unknown failure must never look like
// success or like a missing file.
func Errno(err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.Canceled):
		// The caller's system call was interrupted and the kernel
		// cancelled the request: EINTR, which callers retry, not EIO.
		return syscall.EINTR
	case errors.Is(err, ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, ErrAccess):
		return syscall.EACCES
	case errors.Is(err, ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, ErrChanged):
		// What an NFS client gets for a file that changed under it.
		return syscall.ESTALE
	case errors.Is(err, ErrTooLarge):
		return syscall.EFBIG
	default:
		return syscall.EIO
	}
}
