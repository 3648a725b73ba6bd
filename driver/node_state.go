package driver

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

// stagedVolume is what the node remembers of a staged volume, so that the
// reconcile loop can rebuild its mounts after the mounter restarts, even
// after the node plugin itself restarted.
type stagedVolume struct {
	VolumeID   string `json:"volumeID"`
	Source     string `json:"source"` // objfuse:bucket[/prefix]
	MounterUID string `json:"mounterUID"`
	// MounterNamespace is where the mounter pod runs when not in the
	// driver's namespace (volume.ParamMounterNamespace).
	MounterNamespace string          `json:"mounterNamespace,omitempty"`
	ReadOnly         bool            `json:"readOnly"`
	MountGroup       *uint32         `json:"mountGroup,omitempty"`
	Staging          string          `json:"staging"`
	Targets          map[string]bool `json:"targets"` // path → read-only
	// Pods are the pods the targets were published for, by target, as
	// kubelet told (podInfoOnMount): where the node's Events go.
	Pods map[string]podRef `json:"pods,omitempty"`
	// ToldLostUploads is the count of lost uploads of the mounter that
	// the pods were told of, so that a restarted node plugin does not
	// tell them again.
	ToldLostUploads int64 `json:"toldLostUploads,omitempty"`
	// ToldConflicts is the same for the mounter's write conflicts.
	ToldConflicts int64 `json:"toldConflicts,omitempty"`
	// Inline: a pod's inline volume, staged by the node itself for that
	// pod (node_inline.go) and unstaged with its last target.
	Inline bool `json:"inline,omitempty"`
}

// mounter is the volume's mounter on nodeID, for finding its pod.
func (st *stagedVolume) mounter(nodeID string) spec.Mounter {
	return spec.MounterIn(st.VolumeID, nodeID, st.MounterNamespace)
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

// nodeState is what the node keeps of its volumes, in one place: the
// staged volumes, in files under the state directory (so that a
// restarted node plugin still repairs their mounts), and in memory what
// the checks found, for NodeGetVolumeStats, under one lock.
type nodeState struct {
	dir string // the state directory
	log *slog.Logger
	// gauge counts the abnormal volumes, for the driver's metrics.
	gauge prometheus.Gauge
	// survival is the driver's metric of each volume's survival mode.
	survival *prometheus.GaugeVec

	mu       sync.Mutex
	abnormal map[string]string // volume id → why its mount is broken
	pending  map[string]string // volume id → what waits for its upload (pendingNote)
	modes    map[string]string // volume id → survival mode (handoff.Mode*)

	// The reconcile loop's own memory, which only it reads and writes:
	// checks in a row each volume hung, and what the node last told each
	// volume's pods about its mounter's health.
	hangs       map[string]int
	healthNotes map[string]healthNote
	// takeoverSince is when each hung volume whose connection the node
	// keeps began to wait for a successor mounter; lendAsked is the
	// mounter process (pid) last asked to lend each volume's handle.
	takeoverSince map[string]time.Time
	lendAsked     map[string]lendAsk
	// ended are the volumes whose mounter a watch saw end, until a
	// successor serves (node_survival.go).
	ended map[string]bool
}

func newNodeState(dir string, gauge prometheus.Gauge, survival *prometheus.GaugeVec, log *slog.Logger) *nodeState {
	return &nodeState{dir: dir, log: log, gauge: gauge, survival: survival, abnormal: map[string]string{}, pending: map[string]string{},
		modes: map[string]string{}, hangs: map[string]int{}, healthNotes: map[string]healthNote{},
		takeoverSince: map[string]time.Time{}, lendAsked: map[string]lendAsk{}, ended: map[string]bool{}}
}

// podsAt are the pods the volumes staged here were published at targets
// for; a target published before objfuse kept them has none.
func (s *nodeState) podsAt(targets []string) []podRef {
	want := map[string]bool{}
	for _, t := range targets {
		want[t] = true
	}
	var pods []podRef
	for _, st := range s.staged() {
		for t, p := range st.Pods {
			if want[t] {
				pods = append(pods, p)
			}
		}
	}
	return pods
}

func (s *nodeState) volumesDir() string { return filepath.Join(s.dir, "volumes") }

// volumeDir is the node's directory for a volume: a hash of its id, so an
// id can never name a path outside the state directory.
func (s *nodeState) volumeDir(volumeID string) string {
	return filepath.Join(s.volumesDir(), volume.Key(volumeID))
}

// inlineStaging is where an inline volume is mounted for its pod's
// target to be bound to: outside the volume's state directory, which is
// removed whole when the volume is unstaged.
func (s *nodeState) inlineStaging(volumeID string) string {
	return filepath.Join(s.dir, "inline", volume.Key(volumeID))
}

func (s *nodeState) stateFile(volumeID string) string {
	return filepath.Join(s.volumeDir(volumeID), "volume.json")
}

// load reads what the node keeps of a staged volume.
func (s *nodeState) load(volumeID string) (*stagedVolume, error) {
	return readState(s.stateFile(volumeID))
}

func readState(path string) (*stagedVolume, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st stagedVolume
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("state %s: %w", path, err)
	}
	if st.Targets == nil {
		st.Targets = map[string]bool{}
	}
	return &st, nil
}

// save writes atomically, so a crash leaves the old or the new state.
func (s *nodeState) save(st *stagedVolume) error {
	b, _ := json.MarshalIndent(st, "", "  ")
	path := s.stateFile(st.VolumeID)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return os.Rename(tmp, path)
}

// staged lists every volume this node has staged.
func (s *nodeState) staged() []*stagedVolume {
	files, _ := filepath.Glob(filepath.Join(s.volumesDir(), "*", "volume.json"))
	sort.Strings(files)
	var out []*stagedVolume
	for _, f := range files {
		if st, err := readState(f); err == nil {
			out = append(out, st)
		} else {
			s.log.Warn("unreadable volume state", "file", f, "err", err)
		}
	}
	return out
}

// setAbnormal keeps why a volume's mount is broken, for
// NodeGetVolumeStats; "" says it is not.
func (s *nodeState) setAbnormal(volumeID, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keepNote(s.abnormal, volumeID, why)
	s.gauge.Set(float64(len(s.abnormal)))
}

// setPending keeps what waits for its upload on the volume's mounter,
// for NodeGetVolumeStats.
func (s *nodeState) setPending(volumeID, note string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keepNote(s.pending, volumeID, note)
}

// keepNote sets volumeID's note in notes; "" removes it.
func keepNote(notes map[string]string, volumeID, note string) {
	if note == "" {
		delete(notes, volumeID)
	} else {
		notes[volumeID] = note
	}
}

// setMode keeps volumeID's survival mode, for NodeGetVolumeStats and
// the metric; "" forgets it (unstaged).
func (s *nodeState) setMode(volumeID, mode string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.modes[volumeID]; old != "" && old != mode {
		s.survival.DeleteLabelValues(volumeID, old)
	}
	keepNote(s.modes, volumeID, mode)
	if mode != "" {
		s.survival.WithLabelValues(volumeID, mode).Set(1)
	}
}

func (s *nodeState) mode(volumeID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.modes[volumeID]
}

func (s *nodeState) pendingNote(volumeID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[volumeID]
}

func (s *nodeState) abnormalReason(volumeID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.abnormal[volumeID]
}
