package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// takeoverBound bounds how long a hung mount whose connection the node
// keeps waits for its mounter to come back and take it over, while
// nothing listens on the mounter's socket. A mounter container restarts
// within seconds (OnFailure, the image already on the node); kubelet's
// crash-loop back-off then doubles from 10 s, so 60 s lets a successor
// start after one or two quick crashes, while pods that wait longer are
// better served by an error and today's repair than by a mount that
// hangs on.
const takeoverBound = 60 * time.Second

// mounterSeen is what a check learned of a volume's mounter on its socket.
type mounterSeen struct {
	answered  bool // it answered OpStatus
	serving   bool
	resumable bool // not serving, and could take over a kept connection
	source    string
	// gone: nothing listens there (the process is dead, or restarting
	// and not listening yet; or its pod is gone). Neither answered nor
	// gone is a mounter that accepts but does not answer: stuck.
	gone bool
	err  error // why it did not answer
}

func seeMounter(rep handoff.Reply, err error) mounterSeen {
	if err != nil {
		return mounterSeen{gone: mounterGone(err), err: err}
	}
	return mounterSeen{answered: true, serving: rep.Serving, resumable: !rep.Serving && rep.Resumable, source: rep.Source}
}

// takeoverStep is what a check does about a hung mount whose connection
// the node keeps.
type takeoverStep int

const (
	takeoverNotMine takeoverStep = iota // the mounter serves, or is stuck: decideRepair's business
	takeoverNow                         // hand the kept connection to the mounter
	takeoverWait                        // nothing listens yet: wait for the restarted mounter
	takeoverGiveUp                      // no successor can take it over: abort and repair
)

// decideTakeover is a check's decision for a mount that hangs while the
// node keeps its connection alive, so that requests queue rather than
// fail: from what its mounter answered, and how long the mount has
// waited for a successor. It returns why it gives up, for the Event.
func decideTakeover(m mounterSeen, wantSource string, waited time.Duration) (takeoverStep, string) {
	switch {
	case m.answered && !sameSource(m.source, wantSource):
		return takeoverGiveUp, fmt.Sprintf("the mounter there serves %q, not %q", m.source, wantSource)
	case m.serving:
		return takeoverNotMine, ""
	case m.resumable:
		return takeoverNow, ""
	case m.answered:
		return takeoverGiveUp, "its restarted mounter cannot resume the connection (an older mounter, no state saved by the previous one, or a kernel that cannot resend unanswered requests)"
	case !m.gone:
		// Accepts and says nothing: not restarting but stuck (stopped,
		// starved), which the hang checks abort as they always did.
		return takeoverNotMine, ""
	case waited < takeoverBound:
		return takeoverWait, ""
	}
	return takeoverGiveUp, fmt.Sprintf("no mounter came back to take it over within %s (%v)", takeoverBound, m.err)
}

// sameSource says whether a mounter's source is the volume's.
func sameSource(mounter, want string) bool {
	return strings.TrimSuffix(strings.TrimPrefix(mounter, "objfuse:"), "/") == strings.TrimPrefix(want, "objfuse:")
}

// handOver acts on a hung mount whose connection the node keeps, from
// its mounter's answer to OpStatus (rep, err), and returns what it did:
// takeoverNow (done), takeoverWait (waiting), takeoverGiveUp (the caller
// aborts and repairs), or takeoverNotMine (the hang checks decide). A
// mounter pod replaced while its mount hung is asked too (socket then
// names its socket): a new pod given the connection by a planned
// hand-off can resume it.
func (n *nodeServer) handOver(ctx context.Context, st *stagedVolume, socket *string, rep handoff.Reply, err error) takeoverStep {
	seen := seeMounter(rep, err)
	if seen.gone && n.findReplacedMounter(ctx, st) {
		*socket = n.mounterSocket(st)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rep, err = handoff.Call(cctx, *socket, handoff.Request{Op: handoff.OpStatus}, -1)
		cancel()
		seen = seeMounter(rep, err)
	}
	since, waiting := n.state.takeoverSince[st.VolumeID]
	if !waiting {
		since = time.Now()
	}
	step, why := decideTakeover(seen, st.Source, time.Since(since))
	switch step {
	case takeoverWait:
		n.state.takeoverSince[st.VolumeID] = since
		n.state.setAbnormal(st.VolumeID, fmt.Sprintf("the FUSE mount waits for its mounter to restart and take its connection over (since %s, for %s at most): requests pause meanwhile, and go on then", stamp(since), takeoverBound))
	case takeoverNow:
		if err := n.takeOver(ctx, st, *socket); err != nil {
			n.giveUpTakeover(ctx, st, "the restarted mounter could not take it over: "+err.Error())
			return takeoverGiveUp
		}
		n.tookOver(ctx, st, time.Since(since))
		n.watchMounter(st.VolumeID, *socket)
	case takeoverGiveUp:
		n.giveUpTakeover(ctx, st, why)
	}
	return step
}

// takeOver hands a duplicate of st's kept connection to its mounter,
// which resumes it from its predecessor's saved state; the mounts stay
// as they are.
func (n *nodeServer) takeOver(ctx context.Context, st *stagedVolume, socket string) error {
	fd, err := n.keeper.dup(st.VolumeID)
	if err != nil {
		return err
	}
	defer closeFD(fd) // the mounter has its own once it answers
	cctx, cancel := context.WithTimeout(ctx, n.mounterWait)
	defer cancel()
	rep, err := handoff.Call(cctx, socket, handoff.Request{Op: handoff.OpServe, MountGroup: st.MountGroup, TakeOver: true, Kept: true}, fd)
	if err == nil && !rep.Serving {
		err = errors.New("the mounter answered but does not serve")
	}
	return err
}

// tookOver records a takeover that worked.
func (n *nodeServer) tookOver(ctx context.Context, st *stagedVolume, waited time.Duration) {
	delete(n.state.takeoverSince, st.VolumeID)
	delete(n.state.ended, st.VolumeID)
	n.state.hangs[st.VolumeID] = 0
	n.state.setAbnormal(st.VolumeID, "")
	n.takeovers.Inc()
	n.log.Info("a restarted mounter took the FUSE connection over", "volume", st.VolumeID, "waited", waited.Round(time.Millisecond))
	_ = n.events.Tell(ctx, st.targetPaths(), corev1.EventTypeNormal, reasonTakenOver, fmt.Sprintf(
		"The objfuse mounter of volume %s restarted and took the volume's connection over: requests paused while it restarted and went on; no container needs a restart.",
		st.VolumeID))
}

// giveUpTakeover tells the pods why no successor can take st's kept
// connection over; the caller aborts the connection, drops the handle
// and repairs the mount as it would have without one (and tells that).
func (n *nodeServer) giveUpTakeover(ctx context.Context, st *stagedVolume, why string) {
	delete(n.state.takeoverSince, st.VolumeID)
	delete(n.state.ended, st.VolumeID)
	n.takeoverFallbacks.Inc()
	n.log.Warn("FUSE connection not taken over; aborting it to mount the volume again", "volume", st.VolumeID, "why", why)
	_ = n.events.Tell(ctx, st.targetPaths(), corev1.EventTypeWarning, reasonTakeoverFailed, fmt.Sprintf(
		"The objfuse mounter of volume %s stopped and no successor could take its connection over: %s. The node plugin aborts the connection (requests waiting on it fail) and mounts the volume again.",
		st.VolumeID, why))
}

// borrowConnection asks st's serving mounter for a handle of the
// connection it serves (OpLend), to keep: the node plugin restarted and
// lost the one it kept, or kept none. The handle is checked, for the
// mounter is less trusted than the node plugin: it must be a live FUSE
// connection, and the one mounted at the staging path where the kernel
// names it. Each mounter process (pid) is asked once if it answers (an
// older one does not know the op, and would refuse every check); one
// that did not answer (busy past the 2 s bound) is asked again at the
// next check.
func (n *nodeServer) borrowConnection(ctx context.Context, st *stagedVolume, socket string, pid int) {
	if pid != 0 && n.state.lendAsked[st.VolumeID] == pid {
		return
	}
	n.state.lendAsked[st.VolumeID] = pid
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

// survivalMode is how a volume's mount survives its mounter: takeover
// only when the mounter says it can resume a connection and the node
// keeps the connection to hand over; repair otherwise (an older mounter
// says nothing).
func survivalMode(kept bool, mounterMode string) string {
	if kept && mounterMode == handoff.ModeTakeover {
		return handoff.ModeTakeover
	}
	return handoff.ModeRepair
}

// withMode adds to why a volume is abnormal how its mount survives its
// mounter, which says what its pods can expect.
func withMode(why, mode string) string {
	switch mode {
	case handoff.ModeTakeover:
		return why + " [survival mode: takeover: requests wait for a restarted mounter to resume them]"
	case handoff.ModeRepair:
		return why + " [survival mode: repair: the volume is mounted again; containers without mountPropagation HostToContainer must restart]"
	}
	return why
}

// mounterSocket is where st's mounter listens.
func (n *nodeServer) mounterSocket(st *stagedVolume) string {
	socket, _ := spec.SocketOnNode(n.kubeletDir, st.MounterUID)
	return socket
}
