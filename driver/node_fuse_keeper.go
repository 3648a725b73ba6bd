package driver

import (
	"errors"
	"sync"

	"golang.org/x/sys/unix"
)

// connKeeper keeps a handle of each staged volume's FUSE connection in the
// node plugin's memory, so that the connection outlives its mounter: the
// kernel ends a FUSE connection when the last handle of it closes, and
// with one kept here a mounter's death leaves its requests waiting for a
// successor (OpServe with TakeOver) instead of failing them (ENOTCONN).
// Handles are close-on-exec and die with the process; a restarted node
// plugin borrows them back from the mounters (OpLend).
//
// A nil keeper keeps nothing (takeover off): keep closes what it is
// given, and the connection dies with its mounter as it always did.
type connKeeper struct {
	// conn is mounts.Mounter.Connection: the connection a handle holds.
	conn func(fd int) (int, error)

	mu   sync.Mutex
	kept map[string]int // volume id → handle
}

func newConnKeeper(conn func(fd int) (int, error)) *connKeeper {
	return &connKeeper{conn: conn, kept: map[string]int{}}
}

// keep takes fd, a handle of volumeID's connection (now the keeper's to
// close), in place of any handle kept before.
func (k *connKeeper) keep(volumeID string, fd int) {
	if k == nil {
		closeFD(fd)
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if old, ok := k.kept[volumeID]; ok {
		closeFD(old)
	}
	k.kept[volumeID] = fd
}

// drop closes volumeID's handle: after its unmount (NodeUnstage), when a
// repair replaces the mount, or when the node gives up a takeover.
// Closed after the unmount, it does not keep a busy mount's requests
// waiting: the connection ends with its last handle.
func (k *connKeeper) drop(volumeID string) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if fd, ok := k.kept[volumeID]; ok {
		closeFD(fd)
		delete(k.kept, volumeID)
	}
}

// connection is the connection volumeID's kept handle holds (or
// mounts.UnknownConnection), and whether one lives. A handle whose
// connection ended (aborted, unmounted) is dropped: nothing can take it
// over.
func (k *connKeeper) connection(volumeID string) (int, bool) {
	if k == nil {
		return 0, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	fd, ok := k.kept[volumeID]
	if !ok {
		return 0, false
	}
	conn, err := k.conn(fd)
	if err != nil {
		closeFD(fd)
		delete(k.kept, volumeID)
		return 0, false
	}
	return conn, true
}

// errNotKept: no handle of the volume's connection is kept.
var errNotKept = errors.New("the node plugin keeps no handle of the volume's FUSE connection")

// dup is a new handle of volumeID's connection (close-on-exec), the
// caller's to close once it handed it over.
func (k *connKeeper) dup(volumeID string) (int, error) {
	if k == nil {
		return -1, errNotKept
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	fd, ok := k.kept[volumeID]
	if !ok {
		return -1, errNotKept
	}
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
}
