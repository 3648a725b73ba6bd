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
	// be dead, its requests queued for a successor (node_survival.go;
	// handOver, below).
	_, kept := n.keeper.connection(volumeID)
	var perr error
	if kept && (n.upgrading(volumeID) || n.state.ended[volumeID]) && successorAwaited(status) {
		// Its mounter ended or is handing over, and its socket says no
		// one serves: the mount hangs, no need to wait for a probe to
		// time out (node_survival.go).
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

// mounterSocket is where st's mounter listens.
func (n *nodeServer) mounterSocket(st *stagedVolume) string {
	socket, _ := spec.SocketOnNode(n.kubeletDir, st.MounterUID)
	return socket
}
