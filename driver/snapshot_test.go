package driver_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/tags"

	"github.com/objfuse/objfuse/test/csitest"
	"github.com/objfuse/objfuse/volume"
)

// dataRequests counts the requests that move object bytes through the
// client (a GET of an object, a PUT of one or of a multipart upload's part
// that is not a copy, and not a marker, whose key ends in "/"), as a front
// before MinIO sees them.
type dataRequests struct {
	mu  sync.Mutex
	got []string
}

func (d *dataRequests) see(r *http.Request) bool {
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)
	q := r.URL.Query()
	isObject := len(parts) == 2 && parts[1] != "" && (r.URL.RawQuery == "" || q.Has("partNumber"))
	moves := isObject && (r.Method == http.MethodGet || r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") == "" && !strings.HasSuffix(parts[1], "/"))
	if moves {
		d.mu.Lock()
		d.got = append(d.got, r.Method+" "+r.URL.Path)
		d.mu.Unlock()
	}
	return false
}

func (d *dataRequests) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	got := d.got
	d.got = nil
	return got
}

// tree describes every file, directory and link under root: content
// checksum, mode and mtime, by path.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v %d", fi.Mode(), fi.ModTime().Unix())
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:8])
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: %s is %q, want %q", what, p, got[p], w)
		}
	}
}

// A snapshot, a volume restored from it and a clone hold what the volume
// held (content, modes, mtimes, links) by server-side copies alone: not
// one object's bytes pass through the driver. Later writes on either side
// do not show on the other. For a bucket of its own and for a prefix.
func TestSnapshotsAndClonesCopyServerSide(t *testing.T) {
	env := csitest.Start(t, csitest.Options{})
	ctx := context.Background()
	var seen dataRequests
	front, _ := env.MinIO.ReplyLosingFront(t, seen.see)
	for _, tc := range []struct {
		name   string
		params map[string]string
	}{
		{"bucket", map[string]string{volume.ParamEndpoint: front.Endpoint, volume.ParamPathStyle: "true"}},
		{"prefix", map[string]string{volume.ParamEndpoint: front.Endpoint, volume.ParamPathStyle: "true", volume.ParamBucket: env.MinIO.NewBucket(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := func(s string) string { return filepath.Join(env.Dir, tc.name+"-"+s) }
			id, _ := publishedVolumeOf(t, env, &csi.CreateVolumeRequest{Name: "pvc-orig-" + tc.name, Parameters: tc.params}, dir("s0"), map[string]bool{dir("orig"): false})
			orig := dir("orig")
			mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
			for i := range 60 {
				p := filepath.Join(orig, fmt.Sprintf("d%d", i%3), fmt.Sprintf("f%02d", i))
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(strings.Repeat(fmt.Sprint(i), i*100)), 0o644); err != nil {
					t.Fatal(err)
				}
				if i%2 == 0 {
					os.Chmod(p, 0o600)
					os.Chtimes(p, mtime, mtime.Add(time.Duration(i)*time.Hour))
				}
			}
			if err := os.WriteFile(filepath.Join(orig, "large"), make([]byte, 12<<20), 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("d0/f00", filepath.Join(orig, "link")); err != nil {
				t.Fatal(err)
			}
			want := tree(t, orig)
			if len(seen.take()) == 0 {
				t.Fatal("the front saw no bytes move while the files were written: it would see none anywhere")
			}

			var snap *csi.Snapshot
			for snap == nil || !snap.GetReadyToUse() {
				r, err := env.Controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-" + tc.name, SourceVolumeId: id, Secrets: env.Secrets})
				if err != nil {
					t.Fatalf("CreateSnapshot: %v", err)
				}
				snap = r.GetSnapshot()
			}
			if snap.GetSizeBytes() < 12<<20 {
				t.Errorf("the snapshot's size: %d bytes", snap.GetSizeBytes())
			}
			if moved := seen.take(); len(moved) > 0 {
				t.Fatalf("taking the snapshot moved object bytes through the driver: %q", moved)
			}

			restored, _ := publishedVolumeOf(t, env, &csi.CreateVolumeRequest{
				Name: "pvc-restored-" + tc.name, Parameters: tc.params,
				VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshotId()}}},
			}, dir("s1"), map[string]bool{dir("restored"): false})
			_, _ = publishedVolumeOf(t, env, &csi.CreateVolumeRequest{
				Name: "pvc-clone-" + tc.name, Parameters: tc.params,
				VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}},
			}, dir("s2"), map[string]bool{dir("clone"): false})
			if moved := seen.take(); len(moved) > 0 {
				t.Fatalf("restoring and cloning moved object bytes through the driver: %q", moved)
			}
			sameTree(t, "restored from the snapshot", tree(t, dir("restored")), want)
			sameTree(t, "clone", tree(t, dir("clone")), want)

			// Each side goes its own way.
			os.WriteFile(filepath.Join(orig, "d0", "f00"), []byte("changed in the original"), 0o644)
			os.WriteFile(filepath.Join(dir("restored"), "new-in-restored"), []byte("x"), 0o644)
			if b, _ := os.ReadFile(filepath.Join(dir("restored"), "d0", "f00")); string(b) == "changed in the original" {
				t.Errorf("a write to the original shows in the restored volume")
			}
			if _, err := os.Stat(filepath.Join(orig, "new-in-restored")); err == nil {
				t.Errorf("a file made in the restored volume shows in the original")
			}
			if _, err := os.Stat(filepath.Join(dir("clone"), "new-in-restored")); err == nil {
				t.Errorf("a file made in the restored volume shows in the clone")
			}
			_ = restored

			// Deleting the snapshot removes its copy; a volume's id given
			// as a snapshot's removes nothing.
			if _, err := env.Controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId(), Secrets: env.Secrets}); err != nil {
				t.Fatalf("DeleteSnapshot: %v", err)
			}
			if _, err := env.Controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id, Secrets: env.Secrets}); err != nil {
				t.Fatalf("DeleteSnapshot of a volume's id: %v", err)
			}
			v, _ := volume.ParseID(id)
			if _, err := env.MinIO.Client().StatObject(ctx, v.Bucket, v.Prefix+"large", minio.StatObjectOptions{}); err != nil {
				t.Fatalf("the volume after DeleteSnapshot of its id: %v", err)
			}
		})
	}
}

// A snapshot whose copy a controller restart cut short is finished by the
// next CreateSnapshot of the same name.
func TestASnapshotCutShortIsFinished(t *testing.T) {
	env := csitest.Start(t, csitest.Options{})
	ctx := context.Background()
	vol, err := env.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-cut", VolumeCapabilities: mountCap(), Secrets: env.Secrets})
	if err != nil {
		t.Fatal(err)
	}
	src, _ := volume.ParseID(vol.GetVolume().GetVolumeId())
	mc := env.MinIO.Client()
	for i := range 20 {
		if _, err := mc.PutObject(ctx, src.Bucket, fmt.Sprintf("k%02d", i), strings.NewReader(fmt.Sprint(i)), -1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// What a controller stopped after the first copies leaves.
	snapBucket := cutSnapshot(t, mc, "snapshot-cut", src.Bucket)
	if _, err := mc.CopyObject(ctx, minio.CopyDestOptions{Bucket: snapBucket, Object: "k00"}, minio.CopySrcOptions{Bucket: src.Bucket, Object: "k00"}); err != nil {
		t.Fatal(err)
	}
	r, err := env.Controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-cut", SourceVolumeId: vol.GetVolume().GetVolumeId(), Secrets: env.Secrets})
	if err != nil || !r.GetSnapshot().GetReadyToUse() || r.GetSnapshot().GetCreationTime().GetSeconds() != 1700000000 {
		t.Fatalf("CreateSnapshot after a cut: %v, %v; want the snapshot begun then, ready", r, err)
	}
	n := 0
	for o := range mc.ListObjects(ctx, snapBucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		n++
	}
	if n != 20 {
		t.Fatalf("the snapshot holds %d objects, want 20", n)
	}
}

// cutSnapshot leaves what a controller stopped in the middle of taking
// snapshot name of the volume of bucket srcBucket leaves: the snapshot's
// bucket, recorded as copying since 1700000000, and no object yet. It
// returns the bucket.
func cutSnapshot(t *testing.T, mc *minio.Client, name, srcBucket string) string {
	t.Helper()
	ctx := context.Background()
	bucket := volume.BucketFor(name)
	if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	tg, _ := tags.NewTags(map[string]string{
		"objfuse.csi.io/snapshot-name": name, "objfuse.csi.io/source": srcBucket + "/",
		"objfuse.csi.io/state": "copying", "objfuse.csi.io/created": "1700000000",
	}, false)
	if err := mc.SetBucketTagging(ctx, bucket, tg); err != nil {
		t.Fatal(err)
	}
	return bucket
}
