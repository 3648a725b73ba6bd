package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
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

// lendRetry is how long after a refused loan the same mounter is asked
// again (doubling with each refusal, to 16 times this).
const lendRetry = time.Minute

// lendAsk is the last loan asked of a volume's mounter.
type lendAsk struct {
	pid      int
	at       time.Time
	refusals int // by this pid, in a row, counting this one if it refuses
}

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

// borrowConnection asks st's serving mounter for a handle of the
// connection it serves (OpLend), to keep: the node plugin restarted and
// lost the one it kept, or kept none. The handle is checked, for the
// mounter is less trusted than the node plugin: it must be a live FUSE
// connection, and the one mounted at the staging path where the kernel
// names it. A mounter process (pid) that refused is asked again only
// after lendRetry, doubling with each refusal (an older one does not
// know the op, and would refuse every check; a passing refusal must not
// leave the mount without takeover for the mounter's lifetime); one
// that did not answer (busy past the 2 s bound) is asked again at the
// next check.
func (n *nodeServer) borrowConnection(ctx context.Context, st *stagedVolume, socket string, pid int) {
	last, asked := n.state.lendAsked[st.VolumeID]
	if asked && pid != 0 && last.pid == pid && time.Since(last.at) < lendRetry<<min(last.refusals-1, 4) {
		return
	}
	ask := lendAsk{pid: pid, at: time.Now(), refusals: 1}
	if asked && last.pid == pid {
		ask.refusals = last.refusals + 1
	}
	n.state.lendAsked[st.VolumeID] = ask
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rep, fd, err := handoff.CallFD(cctx, socket, handoff.Request{Op: handoff.OpLend}, -1)
	if err != nil && rep.PID == 0 { // every answer carries the pid
		delete(n.state.lendAsked, st.VolumeID) // no answer: ask again
	}
	if err == nil && fd < 0 {
		err = errors.New("it attached no handle")
	}
	if err == nil {
		err = n.checkLent(st, rep, fd)
	}
	if err != nil {
		if fd >= 0 {
			closeFD(fd)
		}
		n.log.Warn("the mounter did not lend its FUSE connection: the mount does not outlive it", "volume", st.VolumeID, "err", err)
		return
	}
	n.keeper.keep(st.VolumeID, fd)
	n.log.Info("keeping the FUSE connection the mounter lent", "volume", st.VolumeID)
}

// checkLent says whether fd, lent by st's mounter, holds the connection
// mounted at st's staging path.
func (n *nodeServer) checkLent(st *stagedVolume, rep handoff.Reply, fd int) error {
	if !sameSource(rep.Source, st.Source) {
		return fmt.Errorf("the mounter serves %q, not %q", rep.Source, st.Source)
	}
	conn, err := n.mounts.Connection(fd)
	if err != nil {
		return err
	}
	m, ok, err := mounts.Mounted(n.mounts, st.Staging)
	switch {
	case err != nil:
		return err
	case !ok || m.FsType != mounts.FSType:
		return fmt.Errorf("%s is not an objfuse mount", st.Staging)
	case conn != mounts.UnknownConnection && conn != m.Minor:
		return fmt.Errorf("the lent handle holds FUSE connection %d; the one at %s is %d", conn, st.Staging, m.Minor)
	}
	return nil
}
