package driver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
)

// healthNote is what the node last told a volume's pods about its
// mounter's health, so that each change is told once.
type healthNote struct {
	problemKind  string
	problemSince time.Time
	lostUploads  int64
	why          string // the abnormal reason it gave
}

// noteHealth tells the pods using st what its mounter says they must know
// (S3 refusing the mount's requests, files that were closed but never
// uploaded) when it is news, and returns why the volume is abnormal: ""
// when it is not. A mount that answers may still fail every request with
// EACCES or EIO, which no one reading one failed call can tell apart.
func (d *Driver) noteHealth(ctx context.Context, st *stagedVolume, h handoff.Health) string {
	was := d.healthNotes[st.VolumeID]
	now := healthNote{problemKind: h.ProblemKind, problemSince: h.ProblemSince, lostUploads: h.LostUploads}
	targets := st.targetPaths()
	if h.Problem != "" {
		now.why = describeProblem(st.VolumeID, h)
		if was.problemKind != now.problemKind || !was.problemSince.Equal(now.problemSince) {
			d.log.Warn("S3 refuses the volume's requests", "volume", st.VolumeID, "kind", h.ProblemKind, "problem", h.Problem)
			d.events.Tell(ctx, targets, corev1.EventTypeWarning, reasonS3Problem, now.why)
		}
	} else if was.problemKind != "" {
		d.log.Info("S3 serves the volume again", "volume", st.VolumeID)
		d.events.Tell(ctx, targets, corev1.EventTypeNormal, reasonS3Recovered, fmt.Sprintf(
			"S3 serves volume %s again (its requests failed from %s for %s).", st.VolumeID, stamp(was.problemSince), time.Since(was.problemSince).Round(time.Second)))
	}
	// A restarted mounter counts from 0 again.
	if lost := h.LostUploads - was.lostUploads; lost > 0 || (lost < 0 && h.LostUploads > 0) {
		if lost < 0 {
			lost = h.LostUploads
		}
		d.log.Error("uploads after an asynchronous close failed", "volume", st.VolumeID, "files", lost, "latest", h.LastLostUpload)
		d.events.Tell(ctx, targets, corev1.EventTypeWarning, reasonUploadFailed, fmt.Sprintf(
			"%d file(s) of volume %s were closed (asyncClose) but could not be uploaded to S3: their data is not stored. The latest: %s. Their next fsync or close fails with EIO; write them again once S3 accepts the requests.",
			lost, st.VolumeID, h.LastLostUpload))
	}
	d.healthNotes[st.VolumeID] = now
	return now.why
}

// describeProblem says what is wrong and what to do, for a pod's Events
// and NodeGetVolumeStats.
func describeProblem(volumeID string, h handoff.Health) string {
	since := stamp(h.ProblemSince)
	switch h.ProblemKind {
	case handoff.ProblemAccess:
		return fmt.Sprintf("S3 refuses the requests of volume %s since %s: %s. Reads and writes fail with EACCES until it accepts them: fix the Secret the StorageClass names (csi.storage.k8s.io/controller-publish-secret-name), which reaches running mounts within about 2 minutes, or the bucket's policy.", volumeID, since, h.Problem)
	case handoff.ProblemBucket:
		return fmt.Sprintf("The bucket of volume %s is gone since %s: %s. It was deleted outside Kubernetes; reads and writes fail until it exists again.", volumeID, since, h.Problem)
	default:
		return fmt.Sprintf("S3 does not answer the requests of volume %s since %s: %s. Reads and writes fail with EIO until it does: check the endpoint and the network from this node.", volumeID, since, h.Problem)
	}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// targetPaths are st's publish targets.
func (st *stagedVolume) targetPaths() []string {
	targets := make([]string, 0, len(st.Targets))
	for t := range st.Targets {
		targets = append(targets, t)
	}
	return targets
}
