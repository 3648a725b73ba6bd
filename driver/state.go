package driver

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/objfuse/objfuse/volume"
)

// stagedVolume is what the node remembers of a staged volume, so that the
// reconcile loop can rebuild its mounts after the mounter restarts, even
// after the node plugin itself restarted.
type stagedVolume struct {
	VolumeID   string          `json:"volumeID"`
	Source     string          `json:"source"` // objfuse:bucket[/prefix]
	MounterUID string          `json:"mounterUID"`
	ReadOnly   bool            `json:"readOnly"`
	MountGroup *uint32         `json:"mountGroup,omitempty"`
	Staging    string          `json:"staging"`
	Targets    map[string]bool `json:"targets"` // path → read-only
	// Pods are the pods the targets were published for, by target, as
	// kubelet told (podInfoOnMount): where the node's Events go.
	Pods map[string]podRef `json:"pods,omitempty"`
	// ToldLostUploads is the count of lost uploads of the mounter that
	// the pods were told of, so that a restarted node plugin does not
	// tell them again.
	ToldLostUploads int64 `json:"toldLostUploads,omitempty"`
	// ToldConflicts is the same for the mounter's write conflicts.
	ToldConflicts int64 `json:"toldConflicts,omitempty"`
}

// podRef names a pod, for an Event about it.
type podRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// Keys of a NodePublishVolume's volume context that name the pod it is
// for (the CSIDriver's podInfoOnMount).
const (
	ctxPodName      = "csi.storage.k8s.io/pod.name"
	ctxPodNamespace = "csi.storage.k8s.io/pod.namespace"
	ctxPodUID       = "csi.storage.k8s.io/pod.uid"
)

// keepPod remembers the pod a publish at target is for, from its volume
// context, and says whether there was one.
func keepPod(st *stagedVolume, target string, vc map[string]string) bool {
	if vc[ctxPodName] == "" {
		return false
	}
	if st.Pods == nil {
		st.Pods = map[string]podRef{}
	}
	st.Pods[target] = podRef{Namespace: vc[ctxPodNamespace], Name: vc[ctxPodName], UID: vc[ctxPodUID]}
	return true
}

// podsAt are the pods the volumes staged here were published at targets
// for; a target published before objfuse kept them has none.
func (d *Driver) podsAt(targets []string) []podRef {
	want := map[string]bool{}
	for _, t := range targets {
		want[t] = true
	}
	var pods []podRef
	for _, st := range d.stagedVolumes() {
		for t, p := range st.Pods {
			if want[t] {
				pods = append(pods, p)
			}
		}
	}
	return pods
}

func (d *Driver) volumesDir() string { return filepath.Join(d.opts.StateDir, "volumes") }

// volumeDir is the node's directory for a volume: a hash of its id, so an
// id can never name a path outside the state directory.
func (d *Driver) volumeDir(volumeID string) string {
	return filepath.Join(d.volumesDir(), volume.Key(volumeID))
}

func (d *Driver) stateFile(volumeID string) string {
	return filepath.Join(d.volumeDir(volumeID), "volume.json")
}

func (d *Driver) loadState(volumeID string) (*stagedVolume, error) {
	return readState(d.stateFile(volumeID))
}

func readState(path string) (*stagedVolume, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s stagedVolume
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("state %s: %w", path, err)
	}
	if s.Targets == nil {
		s.Targets = map[string]bool{}
	}
	return &s, nil
}

// saveState writes atomically, so a crash leaves the old or the new state.
func (d *Driver) saveState(s *stagedVolume) error {
	b, _ := json.MarshalIndent(s, "", "  ")
	path := d.stateFile(s.VolumeID)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return os.Rename(tmp, path)
}

// stagedVolumes lists every volume this node has staged.
func (d *Driver) stagedVolumes() []*stagedVolume {
	files, _ := filepath.Glob(filepath.Join(d.volumesDir(), "*", "volume.json"))
	sort.Strings(files)
	var out []*stagedVolume
	for _, f := range files {
		if s, err := readState(f); err == nil {
			out = append(out, s)
		} else {
			d.log.Warn("unreadable volume state", "file", f, "err", err)
		}
	}
	return out
}

func (d *Driver) setAbnormal(volumeID, why string) {
	d.abnormalMu.Lock()
	defer d.abnormalMu.Unlock()
	keepNote(d.abnormal, volumeID, why)
	d.metrics.abnormal.Set(float64(len(d.abnormal)))
}

// setPending keeps what waits for its upload on the volume's mounter,
// for NodeGetVolumeStats.
func (d *Driver) setPending(volumeID, note string) {
	d.abnormalMu.Lock()
	defer d.abnormalMu.Unlock()
	keepNote(d.pending, volumeID, note)
}

// keepNote sets volumeID's note in notes; "" removes it.
func keepNote(notes map[string]string, volumeID, note string) {
	if note == "" {
		delete(notes, volumeID)
	} else {
		notes[volumeID] = note
	}
}

func (d *Driver) pendingNote(volumeID string) string {
	d.abnormalMu.Lock()
	defer d.abnormalMu.Unlock()
	return d.pending[volumeID]
}

func (d *Driver) abnormalReason(volumeID string) string {
	d.abnormalMu.Lock()
	defer d.abnormalMu.Unlock()
	return d.abnormal[volumeID]
}
