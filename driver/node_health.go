package driver

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
)

// healthNote is what the node last told a volume's pods about its
// mounter's health, so that each change is told once.
type healthNote struct {
	// toldKind and toldSince name the problem told ("" for none), and
	// toldTargets the targets whose pods were told: a pod that starts
	// using the volume later is told too.
	toldKind    string
	toldSince   time.Time
	toldTargets map[string]bool
	// loggedSince is the start of the problem last logged.
	loggedSince time.Time
	// clearChecks counts the checks in a row that found no problem after
	// one was told; recoveredAfterChecks of them tell the recovery.
	clearChecks int
	lostUploads int64
	conflicts   int64  // the mounter's count of conflicts told
	why         string // the abnormal reason given
	// pending is what the mounter last said waits in its journal, and
	// pendingAt when: told as lost should the mounter pod be replaced
	// (tellPendingGone) without reporting them itself.
	pending   handoff.Health
	pendingAt time.Time
}

// recoveredAfterChecks is how many checks in a row must find S3 serving a
// volume before its pods are told it recovered: a policy that refuses
// only some requests clears and comes back, and is one problem.
const recoveredAfterChecks = 3

// abnormalReason is why a volume whose mount answers is abnormal, from
// its mounter's health: "" when it is not. A mount that answers may still
// fail every request with EACCES or EIO, which no one reading one failed
// call can tell apart.
func abnormalReason(volumeID string, h handoff.Health) string {
	if h.Problem == "" {
		return ""
	}
	return describeProblem(volumeID, h)
}

// noteHealth tells the pods using st what its mounter says they must know
// (S3 refusing the mount's requests, files that were closed but never
// uploaded) when it is news.
func (n *nodeServer) noteHealth(ctx context.Context, st *stagedVolume, h handoff.Health) {
	note, known := n.state.healthNotes[st.VolumeID]
	if !known {
		note.lostUploads, note.conflicts = st.ToldLostUploads, st.ToldConflicts
	}
	defer func() { n.state.healthNotes[st.VolumeID] = note }()
	targets := st.targetPaths()
	note.why = ""
	switch {
	case h.Problem != "":
		note.why, note.clearChecks = abnormalReason(st.VolumeID, h), 0
		if !note.loggedSince.Equal(h.ProblemSince) {
			n.log.Warn("the volume's S3 requests fail", "volume", st.VolumeID, "kind", h.ProblemKind, "problem", h.Problem)
			note.loggedSince = h.ProblemSince
		}
		if note.toldKind != h.ProblemKind || !note.toldSince.Equal(h.ProblemSince) {
			note.toldTargets = nil
		}
		if untold := untoldOf(targets, note.toldTargets); len(untold) > 0 &&
			n.events.Tell(ctx, untold, corev1.EventTypeWarning, reasonS3Problem, note.why) == nil {
			note.toldKind, note.toldSince = h.ProblemKind, h.ProblemSince
			if note.toldTargets == nil {
				note.toldTargets = map[string]bool{}
			}
			for _, t := range untold {
				note.toldTargets[t] = true
			}
		}
	case note.toldKind != "":
		if note.clearChecks++; note.clearChecks < recoveredAfterChecks {
			break
		}
		n.log.Info("S3 serves the volume again", "volume", st.VolumeID)
		if n.events.Tell(ctx, targets, corev1.EventTypeNormal, reasonS3Recovered, fmt.Sprintf(
			"S3 serves volume %s again (its requests failed from %s for about %s).", st.VolumeID, stamp(note.toldSince), time.Since(note.toldSince).Round(time.Second))) == nil {
			note.toldKind, note.toldSince, note.toldTargets, note.clearChecks = "", time.Time{}, nil, 0
		}
	}
	n.noteConflicts(ctx, st, &note, targets, h)
	note.pending = handoff.Health{PendingUploads: h.PendingUploads, PendingFiles: h.PendingFiles}
	note.pendingAt = time.Now()
	// A restarted mounter counts from 0 again.
	lost := h.LostUploads - note.lostUploads
	if lost < 0 {
		lost = h.LostUploads
	}
	if lost > 0 {
		names := lostNames(h, lost)
		n.log.Error("uploads no writer waited for failed", "volume", st.VolumeID, "files", lost, "names", names, "latest", h.LastLostUpload)
		if n.events.Tell(ctx, targets, corev1.EventTypeWarning, reasonUploadFailed, fmt.Sprintf(
			"%d file(s) of volume %s were closed (asyncClose) or written through a memory mapping, but could not be uploaded to S3: their data is not stored. The files: %s. The latest failure: %s. The next fsync or close of one closed asynchronously fails with EIO; write them again once S3 accepts the requests.",
			lost, st.VolumeID, names, h.LastLostUpload)) != nil {
			return // told on a later check
		}
	}
	note.lostUploads = h.LostUploads
	if st.ToldLostUploads != h.LostUploads || st.ToldConflicts != note.conflicts {
		st.ToldLostUploads, st.ToldConflicts = h.LostUploads, note.conflicts
		if err := n.state.save(st); err != nil {
			n.log.Error("save state", "volume", st.VolumeID, "err", err)
		}
	}
}

// lostNames lists the keys of the latest lost uploads, of which there
// are the mounter's last few.
func lostNames(h handoff.Health, lost int64) string {
	named := h.LostFiles[max(0, len(h.LostFiles)-int(min(lost, int64(len(h.LostFiles))))):]
	if len(named) == 0 {
		return "not named (an older mounter)"
	}
	return namesOf(named, lost, " (the mounter's log names every one)")
}

// namesOf lists named, the first of total files, and says how many more
// there are, with why.
func namesOf(named []string, total int64, why string) string {
	list := strings.Join(named, ", ")
	if more := total - int64(len(named)); more > 0 {
		list += fmt.Sprintf(" and %d more%s", more, why)
	}
	return list
}

// tellPendingGone tells the pods using st of the files its mounter last
// said wait in its journal, when the mounter's pod was replaced (deleted
// with no grace, evicted, its node's kubelet gone): the journal, on the
// pod's emptyDir, went with it. A mounter given its grace period drains
// and reports what it could not upload itself; one killed at once cannot,
// and this is all anyone knows: files closed since its last check are not
// named.
func (n *nodeServer) tellPendingGone(ctx context.Context, st *stagedVolume) {
	note := n.state.healthNotes[st.VolumeID]
	p := note.pending
	if p.PendingUploads == 0 {
		return
	}
	named := namesOf(p.PendingFiles, p.PendingUploads, "")
	n.log.Error("mounter pod replaced with uploads pending", "volume", st.VolumeID, "files", p.PendingUploads, "names", named)
	_ = n.events.Tell(ctx, st.targetPaths(), corev1.EventTypeWarning, reasonUploadFailed, fmt.Sprintf(
		"The mounter pod of volume %s was replaced while %d file(s) closed asynchronously (asyncClose) waited in its journal for their upload to S3 (at its last check, %s). The journal went with the pod: unless the old mounter uploaded them in its last seconds, their data is not stored. The files: %s. Check them in S3 and write them again if they are missing.",
		st.VolumeID, p.PendingUploads, stamp(note.pendingAt), named))
	note.pending = handoff.Health{}
	n.state.healthNotes[st.VolumeID] = note
}

// pendingNote says what waits for its upload on the volume's mounter,
// for NodeGetVolumeStats: "" for nothing.
func pendingNote(h handoff.Health) string {
	if h.PendingUploads == 0 {
		return ""
	}
	return fmt.Sprintf("%d file(s) (%d bytes) closed asynchronously wait for their upload to S3 in the mounter's journal", h.PendingUploads, h.PendingBytes)
}

// untoldOf are the targets not in told.
func untoldOf(targets []string, told map[string]bool) []string {
	var out []string
	for _, t := range targets {
		if !told[t] {
			out = append(out, t)
		}
	}
	return out
}

// describeProblem says what is wrong and what to do, for a pod's Events
// and NodeGetVolumeStats.
func describeProblem(volumeID string, h handoff.Health) string {
	since := stamp(h.ProblemSince)
	switch h.ProblemKind {
	case handoff.ProblemAccess:
		return fmt.Sprintf("S3 refuses the requests of volume %s since %s: %s. Reads and writes fail with EACCES until it accepts them: fix the credentials Secret (the one the StorageClass names in csi.storage.k8s.io/controller-publish-secret-name, or a static PV's controllerPublishSecretRef), which reaches running mounts within about 2 minutes, or the bucket's policy.", volumeID, since, h.Problem)
	case handoff.ProblemBucket:
		return fmt.Sprintf("The bucket of volume %s is gone since %s: %s. It was deleted outside Kubernetes; reads and writes fail until it exists again.", volumeID, since, h.Problem)
	default:
		return fmt.Sprintf("S3 fails the requests of volume %s since %s: %s. Reads and writes fail with EIO while it does, and uploads no writer waits for are retried for 5 minutes: check the endpoint, and the network from this node.", volumeID, since, h.Problem)
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

// noteConflicts tells the pods using st of changes to files that lost to
// another writer's (kept under a conflict name), when there are new ones.
func (n *nodeServer) noteConflicts(ctx context.Context, st *stagedVolume, note *healthNote, targets []string, h handoff.Health) {
	news := h.Conflicts - note.conflicts
	if news < 0 { // a restarted mounter counts from 0 again
		news = h.Conflicts
	}
	if news == 0 {
		return
	}
	n.log.Warn("write conflicts: changes kept under conflict names", "volume", st.VolumeID, "files", news, "latest", h.LastConflict)
	if n.events.Tell(ctx, targets, corev1.EventTypeWarning, reasonConflict, fmt.Sprintf(
		"%d change(s) to files of volume %s were made to a version that another writer (another node, or another S3 client) replaced meanwhile: the other writer's file was kept, each change was stored beside it under a name ending in \".objfuse-conflict-<time>\", and its close or fsync failed with EIO. The latest: %s. Merge the change by hand, or write the file again.",
		news, st.VolumeID, h.LastConflict)) == nil {
		note.conflicts = h.Conflicts
	}
}
