package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/launcher"
)

// reconcileLoop is the node's desired-versus-actual loop: every staged
// volume should have a FUSE mount that answers. A dead mount (its mounter
// crashed) or a hung one is replaced from the restarted mounter, and the
// staging path and every target are bound again.
func (d *Driver) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(d.opts.ReconcileEvery)
	defer t.Stop()
	for {
		d.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Driver) reconcile(ctx context.Context) {
	for _, st := range d.stagedVolumes() {
		d.reconcileVolume(ctx, st.VolumeID)
	}
}

func (d *Driver) reconcileVolume(ctx context.Context, volumeID string) {
	unlock := d.locks.lock(volumeID)
	defer unlock()
	st, err := d.loadState(volumeID)
	if err != nil {
		return // unstaged meanwhile
	}
	mnt := d.fuseMountpoint(volumeID)
	_, perr := probe(mnt, d.opts.ProbeTimeout)
	if perr == nil {
		if d.abnormalReason(volumeID) != "" {
			d.setAbnormal(volumeID, "")
		}
		return
	}
	if errors.Is(perr, errHung) {
		if m, ok, _ := isMounted(mnt); ok {
			if err := abortConnection(m); err != nil {
				d.log.Error("abort hung mount", "volume", volumeID, "err", err)
			}
		}
	} else if !isDead(perr) {
		d.log.Warn("mount check failed", "volume", volumeID, "err", perr)
	}
	d.setAbnormal(volumeID, fmt.Sprintf("the FUSE mount does not answer (%v); waiting for its mounter to restart", perr))

	// Only a mounter that is up and not serving can take a new handle.
	socket, _ := launcher.SocketOnNode(d.opts.KubeletDir, st.MounterUID)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	rep, err := handoff.Call(cctx, socket, handoff.Request{Op: handoff.OpStatus}, -1)
	cancel()
	if err != nil || rep.Serving {
		d.log.Info("mount dead; mounter not back yet", "volume", volumeID, "err", err)
		return
	}
	start := time.Now()
	if err := d.mountVolume(ctx, st); err != nil {
		d.log.Error("repair mount", "volume", volumeID, "err", err)
		d.setAbnormal(volumeID, "repair failed: "+err.Error())
		return
	}
	d.setAbnormal(volumeID, "")
	d.metrics.repairs.Inc()
	d.log.Info("repaired mount", "volume", volumeID, "targets", len(st.Targets), "took", time.Since(start))
	targets := make([]string, 0, len(st.Targets))
	for t := range st.Targets {
		targets = append(targets, t)
	}
	d.events.VolumeRepaired(ctx, volumeID, targets)
}
