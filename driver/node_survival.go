package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
)

// What happens when a mounter dies, on the node plugin's side. The
// mounter serving a volume's FUSE connection ends: it crashed or was
// killed, it handed its connection over (an upgrade, node_upgrade.go),
// or its pod was replaced. The node hears its end, decides, and acts:
// takeover, a successor mounter resumes the connection the node kept
// (connKeeper, node_fuse_keeper.go) and pods see a pause; or repair, the
// connection is aborted if it hangs and the volume mounted again, and
// pods see errors. Here: how the end is heard, and the decisions. In
// node_reconcile.go: the actions.
//
// A mounter's end is heard at once, not at the next periodic check: the
// node keeps a connection open to the socket of each mounter serving a
// connection the node keeps (watchMounter, handoff.AwaitClose), which
// only the mounter's side closes. The end reaches the reconcile loop
// (mounterWatches.ended, then nodeState.ended), which checks every
// upgradeCheckEvery until a successor serves (nextCheck), and knows the
// mount hangs from the mounter's socket rather than from a probe that
// would wait probeTimeout (successorAwaited). A crash so costs the pods
// the container's restart, not up to a check interval and a probe
// timeout more.
//
// The periodic check of every staged volume, every reconcileEvery
// (reconcileVolume), is the backstop: it finds what no watch heard (an
// end dropped, a mount that died or hangs while its mounter lives, any
// mount with takeover off) from mountinfo and a statfs bounded by
// probeTimeout (checkMounts), then asks the mounter on its socket. A
// healthy mount's check borrows the connection back for a node plugin
// that restarted (borrowConnection), starts the watch, and sets the
// volume's survival mode.
//
// seeMounter reads the mounter's answer (mounterSeen): it serves, it
// could resume a kept connection, it accepts but says nothing (stuck),
// or nothing listens (gone). For a hung mount whose connection the node
// keeps, its requests queued in the kernel rather than failed,
// decideTakeover says: take over now (the mounter there, restarted, or
// new after a hand-over or a pod replaced, can resume it and serves the
// volume's source); wait while nothing listens, takeoverBound at most,
// for the container to restart; give up (another source, a mounter that
// cannot resume, none in time), which aborts and repairs; or leave it to
// decideRepair (the mounter serves, or is stuck). decideRepair decides
// from the probe, the hung checks in a row and whether the mounter
// serves: a mount that hangs while its mounter serves is slow, not gone,
// and one silent on its socket too is aborted only after
// hangsBeforeAbort checks, for aborting fails every open file; a dead or
// unmounted one is mounted again once its mounter is back and not
// serving. survivalMode is which a volume gets (takeover only when the
// node keeps its connection and its mounter can resume it); withMode
// says it in the volume's condition.
//
// The pods using the volume are told in Events (node_events.go):
// ObjfuseMountTakenOver (Normal) when a successor took the connection
// over: requests paused and went on, no container restarts;
// ObjfuseTakeoverFailed (Warning), with why, when none could, before the
// connection is aborted; ObjfuseMountRepaired (Warning) once the volume
// is mounted again: containers without mountPropagation HostToContainer
// must restart; ObjfuseUploadFailed when a replaced mounter pod took
// uploads still pending with it (tellPendingGone, node_health.go).
// Meanwhile NodeGetVolumeStats reports the volume abnormal, and why.

// mounterWatches are the watches under way and the ends they heard.
type mounterWatches struct {
	mu sync.Mutex
	// ctx is the reconcile loop's: watches end with it; none start
	// before it runs (start).
	ctx      context.Context
	watching map[string]bool // volume id → a watch runs
	// ended carries the volume ids whose mounter ended to the reconcile
	// loop; when full, an end is dropped, for the periodic check to find.
	ended chan string
}

func newMounterWatches() *mounterWatches {
	return &mounterWatches{watching: map[string]bool{}, ended: make(chan string, 64)}
}

// start lets watches run until ctx ends.
func (w *mounterWatches) start(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ctx = ctx
}

// watchMounter watches the mounter at socket, serving volumeID, unless a
// watch of the volume runs or the node keeps no connection of it.
func (n *nodeServer) watchMounter(volumeID, socket string) {
	if _, kept := n.keeper.connection(volumeID); !kept {
		return
	}
	w := n.watches
	w.mu.Lock()
	defer w.mu.Unlock()
	ctx := w.ctx
	if ctx == nil || w.watching[volumeID] {
		return
	}
	w.watching[volumeID] = true
	go func() {
		defer func() {
			w.mu.Lock()
			delete(w.watching, volumeID)
			w.mu.Unlock()
		}()
		for handoff.AwaitClose(ctx, socket) {
			// Closed at its deadline, or at its end: connecting again
			// tells.
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case w.ended <- volumeID:
		default:
		}
	}()
}

// successorAwaited says, from its mounter's socket, whether a kept
// connection hangs for want of a server: nothing listens (the mounter
// ended) or a restarted mounter waits to resume it.
func successorAwaited(status func() (handoff.Reply, error)) bool {
	rep, err := status()
	if err != nil {
		return mounterGone(err)
	}
	return rep.Resumable && !rep.Serving
}

// mounterGone says whether a call failed because no mounter listens:
// nothing pending can be lost by going on.
func mounterGone(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

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

// takeoverBound bounds how long a hung mount whose connection the node
// keeps waits for its mounter to come back and take it over, while
// nothing listens on the mounter's socket. A mounter container restarts
// within seconds (OnFailure, the image already on the node); kubelet's
// crash-loop back-off then doubles from 10 s, so 60 s lets a successor
// start after one or two quick crashes, while pods that wait longer are
// better served by an error and today's repair than by a mount that
// hangs on.
const takeoverBound = 60 * time.Second

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

// hangsBeforeAbort is how many checks in a row a mount may hang, its
// mounter silent too, before its connection is aborted.
const hangsBeforeAbort = 3

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
