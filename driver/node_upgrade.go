package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
)

// A node plugin of a new objfuse (helm upgrade rolls the DaemonSet node
// by node) upgrades the running mounters of its node to the image it
// was given, one at a time: it arms a mounter to hand its connection
// over at its next SIGTERM, then changes its pod's image; kubelet stops
// the container and starts the new image in the same pod, which the
// reconcile loop hands the kept connection (handOver, node_reconcile.go).

// upgradeBound bounds an upgrade, from the new image set until the new
// container serves: kubelet restarts the container at once, and the
// image is the node plugin's own, already on the node. A takeover that
// does not come gives up within takeoverBound, and is repaired.
const upgradeBound = takeoverBound + 30*time.Second

// upgradeRetry is how long after a first failed attempt (the mounter
// refused to arm, the API refused the patch) a volume's upgrade is tried
// again; each further failure doubles it, up to upgradeRetryMax: a
// passing hitch (the API or the mounter slow under load) costs seconds,
// a lasting one floods neither the API nor the Events.
const (
	upgradeRetry    = 10 * time.Second
	upgradeRetryMax = 5 * time.Minute
)

// retryAfter is how long the next attempt waits after failed failures in
// a row.
func retryAfter(failed int) time.Duration {
	return min(upgradeRetry<<min(max(failed-1, 0), 5), upgradeRetryMax)
}

// upgradeStopWait bounds how long a stopping node plugin goes on with an
// upgrade under way: the connection the new container is to take over
// lives only in the node plugin once the old container exited. Within
// the pod's default grace period (30 s); a hand-over takes seconds.
const upgradeStopWait = 20 * time.Second

// upgradeCheckEvery is how often the mounts are checked while an upgrade
// is under way: the pods wait from the old container's exit until a
// check hands the connection to the new one.
const upgradeCheckEvery = 500 * time.Millisecond

// mounterUpgrades is the reconcile loop's memory of the node's upgrades;
// only the loop reads and writes it.
type mounterUpgrades struct {
	want   string // the image mounters should run
	pods   *lifecycle.Finder
	counts *prometheus.CounterVec // by result: handed_over, failed
	notes  map[string]upgradeNote // by volume
	// running is the upgrade under way on this node, nil when none.
	running *upgrade
	// stopping: the node plugin stops, and starts no upgrade.
	stopping bool
}

// upgradeNote is what the loop knows of a volume's mounter pod.
type upgradeNote struct {
	podUID  string
	image   string    // its container's image, as the pod's spec says
	told    bool      // its pods were told it waits for new pods (repair mode)
	retryAt time.Time // after a failed attempt, not before
	failed  int       // attempts that failed in a row
}

// upgrade is an upgrade under way: the image set, the container not
// yet serving from it.
type upgrade struct {
	volumeID    string
	from, to    string
	containerID string // the container before it
	since       time.Time
}

// heldBack is why an upgrade does not begin yet: kubelet may hold the
// new container back until then (lifecycle.Container.HeldBackUntil), and
// the pods would wait for it.
type heldBack struct {
	until, lastExit time.Time
	restarts        int32
}

func (h heldBack) Error() string {
	return fmt.Sprintf("kubelet may hold a new container back until %s", stamp(h.until))
}

// upgradeStep is what a check of a healthy volume does about its
// mounter's image.
type upgradeStep int

const (
	upgradeNothing    upgradeStep = iota // the right image, or not now
	upgradeStart                         // arm the hand-over and set the image
	upgradeTellRepair                    // it cannot hand over: tell its pods, once
)

// upgradeCase is what decideUpgrade decides from.
type upgradeCase struct {
	want, image string // the image mounters should run, and this mounter pod's
	mode        string // the volume's survival mode (handoff.Mode*)
	stopping    bool   // the mounter was told to stop
	busy        bool   // another upgrade is under way on this node
	told        bool   // its pods were told it waits for new pods
	backingOff  bool   // an attempt failed, and its retry is not due
}

// decideUpgrade says what a check does about a mounter whose image may
// not be the driver's. Only a mounter whose connection a successor can
// take over (takeover mode: it can resume, and the node keeps the
// connection) is upgraded in place; one in repair mode would have its
// mount broken, so it keeps its image until its pods are recreated, and
// they are told so once. One upgrade at a time: the next waits until the
// previous one's mounter serves again.
func decideUpgrade(c upgradeCase) upgradeStep {
	switch {
	case c.want == "" || c.image == "" || c.image == c.want, c.stopping:
		return upgradeNothing
	case c.mode != handoff.ModeTakeover:
		if c.told {
			return upgradeNothing
		}
		return upgradeTellRepair
	case c.busy, c.backingOff:
		return upgradeNothing
	}
	return upgradeStart
}

// upgradeProgress is what a check found of the upgrade under way.
type upgradeProgress struct {
	gone         bool // the mounter pod is gone (or the volume unstaged)
	newContainer bool // another container runs in the pod than before
	serving      bool // the mounter serves the connection
}

// upgradeOutcome is where an upgrade under way stands.
type upgradeOutcome int

const (
	upgradeWaiting  upgradeOutcome = iota
	upgradeDone                    // the new container serves
	upgradeEnded                   // its pod or volume is gone: nothing to wait for
	upgradeTimedOut                // not serving within upgradeBound
)

// decideUpgradeDone says whether the upgrade under way for waited is
// over: the old container serves until kubelet stops it, so only a new
// container that serves is the upgrade done.
func decideUpgradeDone(p upgradeProgress, waited time.Duration) upgradeOutcome {
	switch {
	case p.gone:
		return upgradeEnded
	case p.newContainer && p.serving:
		return upgradeDone
	case waited >= upgradeBound:
		return upgradeTimedOut
	}
	return upgradeWaiting
}

// considerUpgrade acts on a healthy volume's mounter, from its answer to
// OpStatus and the volume's survival mode.
func (n *nodeServer) considerUpgrade(ctx context.Context, st *stagedVolume, socket string, rep handoff.Reply, mode string) {
	u := n.upgrades
	if u == nil || st.MounterNamespace != "" {
		// A mounter in a PVC's namespace is not changed in place: the
		// node may only read pods there (a right to patch would reach
		// every pod of the tenant). It gets the new image when it is
		// next started.
		return
	}
	note, err := u.note(ctx, st, n.nodeID)
	if err != nil {
		n.log.Warn("read the mounter pod's image", "volume", st.VolumeID, "err", err)
		return
	}
	step := decideUpgrade(upgradeCase{want: u.want, image: note.image, mode: mode, stopping: rep.Stopping,
		busy: u.running != nil || u.stopping, told: note.told, backingOff: time.Now().Before(note.retryAt)})
	switch step {
	case upgradeTellRepair:
		note.told = true
		n.log.Info("mounter not upgraded: in repair mode it cannot hand its connection over", "volume", st.VolumeID, "image", note.image, "want", u.want)
		_ = n.events.Tell(ctx, st.targetPaths(), corev1.EventTypeNormal, reasonUpgradeLater, fmt.Sprintf(
			"The objfuse mounter of volume %s runs %s, not the driver's %s. Its mount survives a mounter only by repair (its mounter or this node cannot hand the connection over), so it is not upgraded in place: it gets the new image when the pods using the volume are recreated.", st.VolumeID, note.image, u.want))
	case upgradeStart:
		var held heldBack
		if err := n.startUpgrade(ctx, st, socket, note); errors.As(err, &held) {
			note.retryAt = held.until
			n.log.Info("mounter upgrade deferred: kubelet would hold its new container back", "volume", st.VolumeID, "restarts", held.restarts, "until", held.until)
			_ = n.events.Tell(ctx, st.targetPaths(), corev1.EventTypeNormal, reasonUpgradeDeferred, fmt.Sprintf(
				"The objfuse mounter of volume %s runs %s, not the driver's %s. Its container restarted %d times, the last at %s, so kubelet may hold a new one back in its crash-loop back-off (up to 5 minutes after that), with the volume's requests paused meanwhile; the node plugin upgrades it in place at %s instead.",
				st.VolumeID, note.image, u.want, held.restarts, stamp(held.lastExit), stamp(held.until)))
		} else if err != nil {
			note.failed++
			retry := retryAfter(note.failed)
			note.retryAt = time.Now().Add(retry)
			u.counts.WithLabelValues("failed").Inc()
			n.log.Error("upgrade mounter", "volume", st.VolumeID, "to", u.want, "err", err)
			_ = n.events.Tell(ctx, st.targetPaths(), corev1.EventTypeWarning, reasonUpgradeFailed, fmt.Sprintf(
				"The node plugin could not upgrade the objfuse mounter of volume %s from %s to %s: %v. The mounter serves on; the node plugin tries again in %s.", st.VolumeID, note.image, u.want, err, retry))
		} else {
			note.image, note.failed = u.want, 0
		}
	}
	u.notes[st.VolumeID] = note
}

// note is what the loop knows of st's mounter pod: read once per pod
// (its image changes only when the node changes it), again after a
// failed attempt.
func (u *mounterUpgrades) note(ctx context.Context, st *stagedVolume, nodeID string) (upgradeNote, error) {
	note, ok := u.notes[st.VolumeID]
	if ok && note.podUID == st.MounterUID && note.retryAt.IsZero() {
		return note, nil
	}
	if ok && note.podUID == st.MounterUID && time.Now().Before(note.retryAt) {
		return note, nil
	}
	c, found, err := u.pods.Container(ctx, st.mounter(nodeID))
	if err != nil || !found || c.PodUID != st.MounterUID {
		// Not the pod the node serves through (replaced meanwhile): the
		// repair finds the new one first.
		return upgradeNote{}, err
	}
	fresh := upgradeNote{podUID: c.PodUID, image: c.Image}
	if note.podUID == c.PodUID {
		fresh.told, fresh.failed = note.told, note.failed
	}
	return fresh, nil
}

// startUpgrade arms st's mounter to hand over at its next SIGTERM, then
// sets its pod's image to the driver's, and remembers the upgrade as
// under way. The container is read again first: the one that is to
// hand over is the one running now.
func (n *nodeServer) startUpgrade(ctx context.Context, st *stagedVolume, socket string, note upgradeNote) error {
	u := n.upgrades
	m := st.mounter(n.nodeID)
	c, found, err := u.pods.Container(ctx, m)
	switch {
	case err != nil:
		return err
	case !found || c.PodUID != note.podUID:
		return fmt.Errorf("mounter pod %s was replaced", m.PodName())
	}
	if until := c.HeldBackUntil(); time.Now().Before(until) {
		return heldBack{until: until, restarts: c.Restarts, lastExit: c.LastExit}
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := handoff.Call(cctx, socket, handoff.Request{Op: handoff.OpHandOver, AtSignal: true}, -1); err != nil {
		return fmt.Errorf("arm the hand-over: %w", err)
	}
	// Armed, the mounter hands over at any SIGTERM, and a pod deleted
	// now is repaired rather than drained: it has uploaded everything
	// written before it exits either way.
	if err := u.pods.SetImage(ctx, m, c.PodUID, u.want); err != nil {
		return fmt.Errorf("armed it to hand over at its next SIGTERM, but %w", err)
	}
	u.running = &upgrade{volumeID: st.VolumeID, from: note.image, to: u.want, containerID: c.ContainerID, since: time.Now()}
	n.log.Info("upgrading mounter: armed the hand-over and set the new image", "volume", st.VolumeID, "pod", m.PodName(), "from", note.image, "to", u.want)
	return nil
}

// followUpgrade checks the upgrade under way, if any: once its new
// container serves, the pods are told and the next may begin.
func (n *nodeServer) followUpgrade(ctx context.Context) {
	u := n.upgrades
	if u == nil || u.running == nil {
		return
	}
	run := u.running
	var p upgradeProgress
	st, err := n.state.load(run.volumeID)
	if err != nil {
		p.gone = true
	} else {
		c, found, err := u.pods.Container(ctx, st.mounter(n.nodeID))
		p.gone = err == nil && !found
		p.newContainer = found && c.ContainerID != "" && c.ContainerID != run.containerID
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rep, err := handoff.Call(cctx, n.mounterSocket(st), handoff.Request{Op: handoff.OpStatus}, -1)
		cancel()
		p.serving = err == nil && rep.Serving
	}
	took := time.Since(run.since)
	switch decideUpgradeDone(p, took) {
	case upgradeWaiting:
		return
	case upgradeDone:
		u.counts.WithLabelValues("handed_over").Inc()
		n.log.Info("upgraded mounter", "volume", run.volumeID, "from", run.from, "to", run.to, "took", took.Round(time.Millisecond))
		_ = n.events.Tell(ctx, st.targetPaths(), corev1.EventTypeNormal, reasonUpgraded, fmt.Sprintf(
			"The objfuse mounter of volume %s was upgraded from %s to %s: the new image serves the volume's connection, %s after the upgrade began. Requests paused meanwhile and went on.", run.volumeID, run.from, run.to, took.Round(time.Millisecond)))
	case upgradeEnded:
		n.log.Info("upgrade ended: the mounter pod or its volume is gone", "volume", run.volumeID, "to", run.to)
	case upgradeTimedOut:
		u.counts.WithLabelValues("failed").Inc()
		n.log.Error("upgraded mounter does not serve", "volume", run.volumeID, "to", run.to, "waited", took.Round(time.Second))
		_ = n.events.Tell(ctx, st.targetPaths(), corev1.EventTypeWarning, reasonUpgradeFailed, fmt.Sprintf(
			"The objfuse mounter of volume %s was set to run %s instead of %s, and its new container does not serve %s later; the node plugin goes on to the next mounter. The mounter pod's status and Events, and any ObjfuseTakeoverFailed Event, say why.", run.volumeID, run.to, run.from, upgradeBound))
	}
	u.running = nil
}

// upgrading says whether volumeID's mounter is being upgraded.
func (n *nodeServer) upgrading(volumeID string) bool {
	return n.upgrades != nil && n.upgrades.running != nil && n.upgrades.running.volumeID == volumeID
}

// nextCheck is how long the reconcile loop waits for its next check.
func (n *nodeServer) nextCheck() time.Duration {
	if n.upgrades != nil && n.upgrades.running != nil || len(n.state.ended) > 0 {
		return min(upgradeCheckEvery, n.reconcileEvery)
	}
	return n.reconcileEvery
}

// finishUpgrade, as the node plugin stops, checks the mounts until the
// upgrade under way, if any, is over (upgradeStopWait at most), so that
// the connection it keeps reaches the new container.
func (n *nodeServer) finishUpgrade() {
	u := n.upgrades
	if u == nil || u.running == nil {
		return
	}
	u.stopping = true
	n.log.Info("stopping: finishing the mounter upgrade under way first", "volume", u.running.volumeID, "for at most", upgradeStopWait)
	ctx, cancel := context.WithTimeout(context.Background(), upgradeStopWait)
	defer cancel()
	t := time.NewTicker(upgradeCheckEvery)
	defer t.Stop()
	for u.running != nil {
		select {
		case <-ctx.Done():
			n.log.Warn("stopping with a mounter upgrade under way", "volume", u.running.volumeID)
			return
		case <-t.C:
		}
		n.reconcile(ctx)
	}
}
