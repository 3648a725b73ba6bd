package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// reconcileLoop is the node's desired-versus-actual loop: every staged
// volume should have a FUSE mount that answers. A dead mount (its mounter
// crashed) or a hung one is replaced from the restarted mounter, and the
// staging path and every target are bound again.
func (n *nodeServer) reconcileLoop(ctx context.Context) {
	n.watches.start(ctx)
	t := time.NewTimer(n.reconcileEvery)
	defer t.Stop()
	for {
		start := time.Now()
		n.reconcile(ctx)
		// Checks start every nextCheck, however long one takes (a hung
		// mount's takes probeTimeout).
		t.Reset(n.nextCheck() - time.Since(start))
		select {
		case <-ctx.Done():
			n.finishUpgrade()
			return
		case <-t.C:
		case id := <-n.watches.ended:
			n.state.ended[id] = true
		}
	}
}

func (n *nodeServer) reconcile(ctx context.Context) {
	staged := map[string]bool{}
	for _, st := range n.state.staged() {
		staged[st.VolumeID] = true
		n.reconcileVolume(ctx, st.VolumeID)
	}
	// After the checks: a takeover just done is seen at once.
	n.followUpgrade(ctx)
	if n.upgrades != nil {
		forgetUnstaged(n.upgrades.notes, staged)
	}
	forgetUnstaged(n.state.healthNotes, staged)
	forgetUnstaged(n.state.hangs, staged)
	forgetUnstaged(n.state.takeoverSince, staged)
	forgetUnstaged(n.state.ended, staged)
	forgetUnstaged(n.state.lendAsked, staged)
}

// forgetUnstaged drops what the loop keeps of volumes no longer staged.
func forgetUnstaged[V any](byVolume map[string]V, staged map[string]bool) {
	for id := range byVolume {
		if !staged[id] {
			delete(byVolume, id)
		}
	}
}

// hangsBeforeAbort is how many checks in a row a mount may hang, its
// mounter silent too, before its connection is aborted.
const hangsBeforeAbort = 3

// checkMounts says what is wrong with st's mounts, if anything: the FUSE
// mount, staging and every target must be objfuse mounts, and the FUSE
// mount must answer. An unmounted path would pass a statfs (it is a plain
// directory on the node), so mountinfo is read first.
func (n *nodeServer) checkMounts(st *stagedVolume) error {
	infos, err := n.mounts.List()
	if err != nil {
		return err
	}
	paths := []string{st.Staging}
	for t := range st.Targets {
		paths = append(paths, t)
	}
	for _, p := range paths {
		if m, ok := mounts.At(infos, p); !ok || m.FsType != mounts.FSType {
			return fmt.Errorf("%s is not an objfuse mount", p)
		}
	}
	_, err = n.mounts.Statfs(st.Staging, n.probeTimeout)
	return err
}

// repairStep is what one check of a volume does about its mounts.
type repairStep int

const (
	stepHealthy        repairStep = iota // the mount answers: take in the mounter's health
	stepWaitSlow                         // it hangs, but its mounter answers and serves: busy, not gone
	stepWaitSilent                       // it hangs and its mounter is silent, not yet for long
	stepAbortAndRepair                   // silent for hangsBeforeAbort checks: abort the connection, then repair
	stepRepair                           // dead or not mounted: mount again once the mounter is back
)

// decideRepair is a check's decision from what it found: mountErr from
// checkMounts, the checks in a row before this one that found the mount
// hung, and (for a hung mount) whether its mounter answered on its socket
// that it serves. A busy mounter (throttled, collecting garbage) is slow,
// not gone: only one that stays silent, on its socket too, check after
// check, is aborted, for aborting fails every open file. It returns the
// step and the count of hung checks after this one.
func decideRepair(mountErr error, hangs int, serving bool) (repairStep, int) {
	switch {
	case mountErr == nil:
		return stepHealthy, 0
	case !errors.Is(mountErr, mounts.ErrHung):
		return stepRepair, 0
	case serving:
		return stepWaitSlow, hangs + 1
	case hangs+1 < hangsBeforeAbort:
		return stepWaitSilent, hangs + 1
	}
	return stepAbortAndRepair, 0
}

func (n *nodeServer) reconcileVolume(ctx context.Context, volumeID string) {
	// A volume being staged or unstaged (which waits for its uploads,
	// minutes while S3 does not answer) is checked on a later pass;
	// waiting here would hold up the checks of every other volume.
	unlock, ok := n.locks.tryLock(volumeID)
	if !ok {
		return
	}
	defer unlock()
	st, err := n.state.load(volumeID)
	if err != nil {
		return // unstaged meanwhile
	}
	socket, _ := spec.SocketOnNode(n.kubeletDir, st.MounterUID)
	status := func() (handoff.Reply, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return handoff.Call(cctx, socket, handoff.Request{Op: handoff.OpStatus}, -1)
	}
	// A kept connection changes what a hung mount means: its mounter may
	// be dead, its requests queued for a successor (node_takeover.go).
	_, kept := n.keeper.connection(volumeID)
	var perr error
	if kept && (n.upgrading(volumeID) || n.state.ended[volumeID]) && successorAwaited(status) {
		// Its mounter ended or is handing over, and its socket says no
		// one serves: the mount hangs, no need to wait for a probe to
		// time out (node_mounter_watch.go).
		perr = mounts.ErrHung
	} else {
		perr = n.checkMounts(st)
	}
	serving, gaveUp := false, false
	if errors.Is(perr, mounts.ErrHung) {
		rep, err := status()
		serving = err == nil && rep.Serving
		if kept {
			switch n.handOver(ctx, st, &socket, rep, err) {
			case takeoverNow, takeoverWait:
				return
			case takeoverGiveUp:
				gaveUp = true
			}
		}
	}
	step, hangs := decideRepair(perr, n.state.hangs[volumeID], serving)
	if gaveUp {
		step, hangs = stepAbortAndRepair, 0
	}
	n.state.hangs[volumeID] = hangs
	if step != stepAbortAndRepair {
		delete(n.state.takeoverSince, volumeID)
	}
	switch step {
	case stepHealthy:
		rep, err := status()
		if err != nil {
			// The mount answers; a mounter slow on its socket says
			// nothing new about S3.
			n.state.setAbnormal(volumeID, n.state.healthNotes[volumeID].why)
			return
		}
		if n.keeper != nil && !kept && rep.Serving {
			n.borrowConnection(ctx, st, socket, rep.PID)
			_, kept = n.keeper.connection(volumeID)
		}
		delete(n.state.ended, volumeID)
		if rep.Serving {
			n.watchMounter(volumeID, socket)
		}
		mode := survivalMode(kept, rep.Mode)
		n.state.setMode(volumeID, mode)
		var h handoff.Health
		if rep.Health != nil {
			h = *rep.Health
		}
		// Abnormal first, then the Events: whoever hears of a problem
		// finds the volume's condition saying so too.
		n.state.setAbnormal(volumeID, abnormalReason(volumeID, h))
		n.state.setPending(volumeID, pendingNote(h))
		n.noteHealth(ctx, st, h)
		n.considerUpgrade(ctx, st, socket, rep, mode)
		return
	case stepWaitSlow:
		n.state.setAbnormal(volumeID, fmt.Sprintf("the FUSE mount answers slowly (%v); its mounter is alive", perr))
		return
	case stepWaitSilent:
		n.state.setAbnormal(volumeID, fmt.Sprintf("the FUSE mount does not answer (%v)", perr))
		return
	case stepAbortAndRepair:
		if kept && !gaveUp {
			n.giveUpTakeover(ctx, st, "its mounter accepts connections on its socket but does not answer: stuck, not restarting")
		}
		if m, ok, _ := mounts.Mounted(n.mounts, st.Staging); ok && m.FsType == mounts.FSType {
			if err := n.mounts.Abort(m); err != nil {
				n.log.Error("abort hung mount", "volume", volumeID, "err", err)
			} else {
				n.log.Warn("aborted hung FUSE connection", "volume", volumeID)
			}
		}
		// After the abort: closing the last handle of a connection would
		// end it too, but not while a stuck mounter still holds one.
		n.keeper.drop(volumeID)
	case stepRepair:
		if !mounts.IsDead(perr) {
			n.log.Info("mount needs repair", "volume", volumeID, "why", perr)
		}
	}
	n.state.setAbnormal(volumeID, fmt.Sprintf("the volume's mount is broken (%v); waiting for its mounter to restart", perr))

	// Only a mounter that is up and not serving can take a new handle.
	rep, err := status()
	if err != nil && n.findReplacedMounter(ctx, st) {
		socket, _ = spec.SocketOnNode(n.kubeletDir, st.MounterUID)
		rep, err = status()
	}
	if err != nil || rep.Serving {
		n.log.Info("mount broken; mounter not back yet", "volume", volumeID, "err", err)
		return
	}
	start := time.Now()
	if err := n.mountVolume(ctx, st); err != nil {
		n.log.Error("repair mount", "volume", volumeID, "err", err)
		n.state.setAbnormal(volumeID, "repair failed: "+err.Error())
		return
	}
	n.state.setAbnormal(volumeID, "")
	n.repairs.Inc()
	n.log.Info("repaired mount", "volume", volumeID, "targets", len(st.Targets), "took", time.Since(start))
	_ = n.events.Tell(ctx, st.targetPaths(), corev1.EventTypeWarning, reasonRepaired, fmt.Sprintf(
		"The objfuse mounter of volume %s restarted and the node plugin re-mounted the volume. Containers with mountPropagation HostToContainer see it again; other containers of this pod must be restarted to use it.", volumeID))
}

// findReplacedMounter looks for a mounter pod that replaced st's (the
// controller starts one for a volume still attached when the pod is
// gone), remembers it and says whether there is one.
func (n *nodeServer) findReplacedMounter(ctx context.Context, st *stagedVolume) bool {
	if n.finder == nil {
		return false
	}
	uid, err := n.finder.PodUID(ctx, st.mounter(n.nodeID))
	if err != nil {
		n.log.Warn("look for a replaced mounter pod", "volume", st.VolumeID, "err", err)
	}
	if uid == "" || uid == st.MounterUID {
		return false
	}
	n.log.Info("mounter pod replaced", "volume", st.VolumeID, "old", st.MounterUID, "new", uid)
	n.tellPendingGone(ctx, st)
	// A new mounter counts its lost uploads and conflicts from 0.
	st.MounterUID, st.ToldLostUploads, st.ToldConflicts = uid, 0, 0
	if note, ok := n.state.healthNotes[st.VolumeID]; ok {
		note.lostUploads, note.conflicts = 0, 0
		n.state.healthNotes[st.VolumeID] = note
	}
	if err := n.state.save(st); err != nil {
		n.log.Error("save state", "volume", st.VolumeID, "err", err)
	}
	return true
}
