package driver_test

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/minio/minio-go/v7"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/csitest"
	"github.com/objfuse/objfuse/volume"
)

// ListSnapshots finds every kind of snapshot CreateSnapshot makes, from
// their records alone: a bucket of its own, a prefix beside volumes at a
// shared bucket's root and beside volumes under a base, and one whose
// copy is not done (not ready); by id, by source volume and all of them,
// page by page.
func TestListSnapshotsFindsWhatCreateSnapshotMade(t *testing.T) {
	env := csitest.Start(t, csitest.Options{})
	ctx := context.Background()
	shared := env.MinIO.NewBucket(t)
	newVolume := func(name string, params map[string]string) string {
		t.Helper()
		v, err := env.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, Parameters: params, VolumeCapabilities: mountCap(), Secrets: env.Secrets})
		if err != nil {
			t.Fatal(err)
		}
		return v.GetVolume().GetVolumeId()
	}
	snapshot := func(name, source string) *csi.Snapshot {
		t.Helper()
		r, err := env.Controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: source, Secrets: env.Secrets})
		if err != nil || !r.GetSnapshot().GetReadyToUse() {
			t.Fatalf("CreateSnapshot %s: %v, %v", name, r, err)
		}
		return r.GetSnapshot()
	}
	own := newVolume("pvc-list-own", nil)
	atRoot := newVolume("pvc-list-root", map[string]string{volume.ParamBucket: shared})
	underBase := newVolume("pvc-list-base", map[string]string{volume.ParamBucket: shared, volume.ParamPrefix: "team/a"})
	nextToBase := newVolume("pvc-list-base2", map[string]string{volume.ParamBucket: shared, volume.ParamPrefix: "team/a"})
	want := map[string]*csi.Snapshot{}
	for _, s := range []*csi.Snapshot{
		snapshot("snap-own", own), snapshot("snap-root", atRoot),
		snapshot("snap-base-1", underBase), snapshot("snap-base-2", underBase), snapshot("snap-base2", nextToBase),
	} {
		want[s.GetSnapshotId()] = s
	}

	// What a controller stopped in the middle of a copy leaves: not ready.
	ownID, _ := volume.ParseID(own)
	cut := cutSnapshot(t, env.MinIO.Client(), "snap-cut", ownID.Bucket)
	cutID := volume.ID{S3: ownID.S3, Bucket: cut}.String()

	list := func(req *csi.ListSnapshotsRequest) ([]*csi.Snapshot, string) {
		t.Helper()
		req.Secrets = env.Secrets
		r, err := env.Controller.ListSnapshots(ctx, req)
		if err != nil {
			t.Fatalf("ListSnapshots(%v): %v", req, err)
		}
		var got []*csi.Snapshot
		for _, e := range r.GetEntries() {
			got = append(got, e.GetSnapshot())
		}
		return got, r.GetNextToken()
	}
	ids := func(ss []*csi.Snapshot) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.GetSnapshotId())
		}
		sort.Strings(out)
		return out
	}

	for id, w := range want {
		got, _ := list(&csi.ListSnapshotsRequest{SnapshotId: id})
		if len(got) != 1 || got[0].GetSnapshotId() != id || got[0].GetSourceVolumeId() != w.GetSourceVolumeId() ||
			!got[0].GetReadyToUse() || got[0].GetSizeBytes() != w.GetSizeBytes() || !got[0].GetCreationTime().AsTime().Equal(w.GetCreationTime().AsTime()) {
			t.Errorf("by id %s: %v, want %v", id, got, w)
		}
	}
	if got, _ := list(&csi.ListSnapshotsRequest{SnapshotId: cutID}); len(got) != 1 || got[0].GetReadyToUse() || got[0].GetSourceVolumeId() != own {
		t.Errorf("the snapshot whose copy is not done: %v, want it not ready, of %s", got, own)
	}
	for _, id := range []string{own, "no-objfuse-id", volume.ID{S3: ownID.S3, Bucket: "no-such-bucket"}.String()} {
		if got, _ := list(&csi.ListSnapshotsRequest{SnapshotId: id}); len(got) != 0 {
			t.Errorf("by id %s, not a snapshot's: %v", id, got)
		}
	}

	bySource := map[string][]string{own: {cutID}, atRoot: nil, underBase: nil, nextToBase: nil}
	for id, s := range want {
		bySource[s.GetSourceVolumeId()] = append(bySource[s.GetSourceVolumeId()], id)
	}
	for src, wantIDs := range bySource {
		sort.Strings(wantIDs)
		got, _ := list(&csi.ListSnapshotsRequest{SourceVolumeId: src})
		if g := ids(got); !slices.Equal(g, wantIDs) {
			t.Errorf("by source volume %s: %q, want %q", src, g, wantIDs)
		}
	}
	if got, _ := list(&csi.ListSnapshotsRequest{SourceVolumeId: atRoot, SnapshotId: cutID}); len(got) != 0 {
		t.Errorf("by id and another volume as source: %v", got)
	}

	// A record that is not where CreateSnapshot puts one (copied along
	// with a bucket, or made by hand) names no snapshot.
	mc := env.MinIO.Client()
	elsewhere := env.MinIO.NewBucket(t)
	if _, err := mc.PutObject(ctx, elsewhere, volume.SnapshotsUnder("")+"copied/", strings.NewReader(""), 0, minio.PutObjectOptions{UserMetadata: map[string]string{
		"Objfuse-Snapshot-Name": "copied", "Objfuse-Source": shared + "/x/", "Objfuse-State": "ready"}}); err != nil {
		t.Fatal(err)
	}

	all, next := list(&csi.ListSnapshotsRequest{})
	allIDs := ids(all)
	wantAll := []string{cutID}
	for id := range want {
		wantAll = append(wantAll, id)
	}
	sort.Strings(wantAll)
	if !slices.Equal(allIDs, wantAll) || next != "" {
		t.Errorf("all snapshots %q (next %q), want %q", allIDs, next, wantAll)
	}
	var paged []*csi.Snapshot
	for token, pages := "", 0; ; pages++ {
		got, nextToken := list(&csi.ListSnapshotsRequest{MaxEntries: 2, StartingToken: token})
		if len(got) > 2 || pages > len(all) {
			t.Fatalf("page %d: %d entries for max 2", pages, len(got))
		}
		paged = append(paged, got...)
		if nextToken == "" {
			break
		}
		token = nextToken
	}
	if g := ids(paged); !slices.Equal(g, allIDs) {
		t.Errorf("page by page: %q, all at once: %q", g, allIDs)
	}

	// A deleted snapshot is gone from every listing.
	var gone *csi.Snapshot
	for _, s := range want {
		if s.GetSourceVolumeId() == underBase {
			gone = s
			break
		}
	}
	if _, err := env.Controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: gone.GetSnapshotId(), Secrets: env.Secrets}); err != nil {
		t.Fatal(err)
	}
	if got, _ := list(&csi.ListSnapshotsRequest{SourceVolumeId: underBase}); len(got) != 1 || got[0].GetSnapshotId() == gone.GetSnapshotId() {
		t.Errorf("after deleting %s, the volume's snapshots: %q", gone.GetSnapshotId(), ids(got))
	}
	if all2, _ := list(&csi.ListSnapshotsRequest{}); slices.Contains(ids(all2), gone.GetSnapshotId()) || len(all2) != len(all)-1 {
		t.Errorf("after deleting %s, all snapshots: %q", gone.GetSnapshotId(), ids(all2))
	}

	// Without credentials, the driver's own; with keys that are wrong,
	// an error that says so, not "no such snapshot".
	some := all[0].GetSnapshotId()
	if r, err := env.Controller.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: some}); err != nil || len(r.GetEntries()) != 1 {
		t.Errorf("by id without credentials: %v, %v; want it found with the driver's own", r, err)
	}
	wrong := map[string]string{s3store.AccessKeyFile: "nobody", s3store.SecretKeyFile: "wrong-secret"}
	for _, req := range []*csi.ListSnapshotsRequest{{SnapshotId: some, Secrets: wrong}, {SourceVolumeId: underBase, Secrets: wrong}, {Secrets: wrong}} {
		if _, err := env.Controller.ListSnapshots(ctx, req); status.Code(err) != codes.PermissionDenied {
			t.Errorf("ListSnapshots(%v) with wrong keys: %v, want PermissionDenied", req, err)
		}
	}

	for _, bad := range []struct {
		req  *csi.ListSnapshotsRequest
		code codes.Code
	}{
		{&csi.ListSnapshotsRequest{StartingToken: "not-a-token"}, codes.Aborted},
		{&csi.ListSnapshotsRequest{MaxEntries: -1}, codes.InvalidArgument},
	} {
		if _, err := env.Controller.ListSnapshots(ctx, bad.req); status.Code(err) != bad.code {
			t.Errorf("ListSnapshots(%v): %v, want %v", bad.req, err, bad.code)
		}
	}
}
