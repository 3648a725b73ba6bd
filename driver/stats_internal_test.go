package driver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/objfuse/objfuse/mounter-pod/mounts"
)

// NodeGetVolumeStats tells a mount that answers from one whose daemon is
// gone or hangs, and from a target that lost its mount, from the mount
// table and a bounded statfs alone (a fake one: no root, no daemon).
func TestVolumeStatsTellWhatIsWrongWithTheMount(t *testing.T) {
	dir := t.TempDir()
	fake := &mounts.Fake{}
	d, err := New(Options{Mode: ModeNode, NodeID: "n", KubeletDir: filepath.Join(dir, "kubelet"), StateDir: filepath.Join(dir, "state"), Events: &toldEvents{}, Mounts: fake})
	if err != nil {
		t.Fatal(err)
	}
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "pods", "a", "mount")
	st := &stagedVolume{VolumeID: "vol", Staging: staging, Targets: map[string]bool{target: false}}
	if err := os.MkdirAll(d.node.state.volumeDir("vol"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := d.node.state.save(st); err != nil {
		t.Fatal(err)
	}
	fd, err := fake.MountFUSE(staging, "objfuse:bucket-1", false)
	if err != nil {
		t.Fatal(err)
	}
	os.NewFile(uintptr(fd), "fuse").Close()
	if err := fake.Bind(staging, target, false); err != nil {
		t.Fatal(err)
	}
	stats := func() *csi.NodeGetVolumeStatsResponse {
		t.Helper()
		r, err := d.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: "vol", VolumePath: target})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := stats(); r.GetVolumeCondition().GetAbnormal() || len(r.GetUsage()) != 2 || r.GetUsage()[0].GetTotal() != 4096<<20 {
		t.Fatalf("a mount that answers: %v", r)
	}
	for _, tc := range []struct {
		name  string
		spoil func()
		want  string
	}{
		{"hung", func() { fake.SetHung(staging) }, "does not answer: statfs " + target + ": mount does not answer (hung)"},
		{"dead", func() { fake.SetDead(staging) }, "transport endpoint is not connected"},
		{"unmounted", func() { fake.UnmountAll(target) }, target + " is not mounted"},
	} {
		tc.spoil()
		if c := stats().GetVolumeCondition(); !c.GetAbnormal() || !strings.Contains(c.GetMessage(), tc.want) {
			t.Errorf("%s: condition %v, want abnormal saying %q", tc.name, c, tc.want)
		}
	}
}

// The pods a volume is published for are the ones kubelet names in the
// volume context (podInfoOnMount): kept with the volume's state, across
// a restart of the node plugin, and dropped with their target, so that
// Events reach them with no right to read pods.
func TestPublishKeepsThePodsEventsGoTo(t *testing.T) {
	dir := t.TempDir()
	fake := &mounts.Fake{}
	opts := Options{Mode: ModeNode, NodeID: "n", KubeletDir: filepath.Join(dir, "kubelet"), StateDir: filepath.Join(dir, "state"), Events: &toldEvents{}, Mounts: fake}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	staging := filepath.Join(dir, "staging")
	if err := os.MkdirAll(d.node.state.volumeDir("vol"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := d.node.state.save(&stagedVolume{VolumeID: "vol", Staging: staging, Targets: map[string]bool{}}); err != nil {
		t.Fatal(err)
	}
	fd, err := fake.MountFUSE(staging, "objfuse:bucket-1", false)
	if err != nil {
		t.Fatal(err)
	}
	os.NewFile(uintptr(fd), "fuse").Close()
	ctx := context.Background()
	publishCap := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}, AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}}
	publish := func(pod string) string {
		target := filepath.Join(dir, "pods", pod, "mount")
		_, err := d.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
			VolumeId: "vol", StagingTargetPath: staging, TargetPath: target, VolumeCapability: publishCap,
			VolumeContext: map[string]string{ctxPodName: pod, ctxPodNamespace: "team-" + pod, ctxPodUID: "uid-" + pod},
		})
		if err != nil {
			t.Fatal(err)
		}
		return target
	}
	a, b := publish("a"), publish("b")
	d, err = New(opts) // a restarted node plugin
	if err != nil {
		t.Fatal(err)
	}
	// Staged again for a replaced mounter pod: the pods stay.
	if _, err := d.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: "vol", StagingTargetPath: staging, VolumeCapability: publishCap,
		PublishContext: map[string]string{PublishContextMounterUID: "01234567-89ab-cdef-0123-456789abcdef"},
		VolumeContext:  map[string]string{"bucket": "bucket-1", "endpoint": "http://127.0.0.1:9000"},
	}); err != nil {
		t.Fatal(err)
	}
	if got := d.node.state.podsAt([]string{a}); len(got) != 1 || got[0] != (podRef{Namespace: "team-a", Name: "a", UID: "uid-a"}) {
		t.Fatalf("pods at %s: %v, want pod a in team-a", a, got)
	}
	if _, err := d.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: a}); err != nil {
		t.Fatal(err)
	}
	if got := d.node.state.podsAt([]string{a, b}); len(got) != 1 || got[0].Name != "b" {
		t.Fatalf("pods after a's unpublish: %v, want b only", got)
	}
	// A target published before the node kept pods learns its pod when
	// kubelet publishes it again.
	st, err := d.node.state.load("vol")
	if err != nil {
		t.Fatal(err)
	}
	st.Pods = nil
	if err := d.node.state.save(st); err != nil {
		t.Fatal(err)
	}
	if publish("b"); len(d.node.state.podsAt([]string{b})) != 1 {
		t.Fatalf("pods at %s after a publish again: %v", b, d.node.state.podsAt([]string{b}))
	}
}
