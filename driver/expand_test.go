package driver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/test/csitest"
	"github.com/objfuse/objfuse/volume"
)

const mib = 1 << 20

// fill writes 64 KiB chunks to h until a write fails or most bytes went,
// and returns how many were acknowledged and the error.
func fill(h *os.File, most int) (int, error) {
	chunk := make([]byte, 64<<10)
	written := 0
	for written < most {
		n, err := h.Write(chunk)
		written += n
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

func bytesOf(t *testing.T, env *csitest.Env, id, path string) (total, used int64) {
	t.Helper()
	st, err := env.Node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range st.GetUsage() {
		if u.GetUnit() == csi.VolumeUsage_BYTES {
			return u.GetTotal(), u.GetUsed()
		}
	}
	t.Fatalf("no byte usage in %v", st)
	return 0, 0
}

// A volume is as large as its PVC asked: a pod writing past it gets
// ENOSPC, NodeGetVolumeStats shows the size; after ControllerExpandVolume
// and NodeExpandVolume the same open file writes on, without a remount.
// For a bucket of its own and for a prefix in a shared bucket.
func TestAVolumeIsAsLargeAsItsPVC(t *testing.T) {
	env := csitest.Start(t, csitest.Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		params map[string]string
	}{
		{"bucket", nil},
		{"prefix", map[string]string{volume.ParamBucket: env.MinIO.NewBucket(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			staging, target := filepath.Join(env.Dir, tc.name+"-staging"), filepath.Join(env.Dir, tc.name+"-target")
			id, _ := publishedVolumeOf(t, env, &csi.CreateVolumeRequest{
				Name: "pvc-quota-" + tc.name, Parameters: tc.params, CapacityRange: &csi.CapacityRange{RequiredBytes: 4 * mib},
			}, staging, map[string]bool{target: false})
			if total, _ := bytesOf(t, env, id, target); total != 4*mib {
				t.Fatalf("NodeGetVolumeStats: %d bytes in all, want the PVC's 4 MiB", total)
			}
			h, err := os.Create(filepath.Join(target, "f"))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			if n, err := fill(h, 6*mib); !errors.Is(err, syscall.ENOSPC) || n != 4*mib {
				t.Fatalf("writing 6 MiB into 4: %d bytes, then %v; want 4 MiB, then ENOSPC", n, err)
			}
			st, err := env.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
			if msg := st.GetVolumeCondition().GetMessage(); err != nil || !strings.Contains(msg, "100% of its 4 MiB used") {
				t.Fatalf("the condition of a full volume: %q, %v; want it to say so", msg, err)
			}

			exp, err := env.Controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
				VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, Secrets: env.Secrets,
			})
			if err != nil || exp.GetCapacityBytes() != 8*mib || !exp.GetNodeExpansionRequired() {
				t.Fatalf("ControllerExpandVolume to 8 MiB: %v, %v", exp, err)
			}
			if _, err := env.Node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{
				VolumeId: id, VolumePath: target, StagingTargetPath: staging, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib},
			}); err != nil {
				t.Fatalf("NodeExpandVolume: %v", err)
			}
			if n, err := fill(h, 3*mib); err != nil {
				t.Fatalf("writing on after the expansion: %v after %d bytes", err, n)
			}
			if err := h.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if total, used := bytesOf(t, env, id, target); total != 8*mib || used != 7*mib {
				t.Fatalf("NodeGetVolumeStats after the expansion: %d bytes, %d used; want 8 MiB, 7 MiB", total, used)
			}

			// A volume does not shrink: a smaller size is the one it has.
			exp, err = env.Controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
				VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * mib}, Secrets: env.Secrets,
			})
			if err != nil || exp.GetCapacityBytes() != 8*mib {
				t.Fatalf("ControllerExpandVolume to a smaller size: %v, %v; want 8 MiB", exp, err)
			}
		})
	}
}

// enforceCapacity "false" records the size and enforces none, as before
// quotas; a StorageClass may not set the size itself.
func TestCapacityNotEnforced(t *testing.T) {
	env := csitest.Start(t, csitest.Options{})
	target := filepath.Join(env.Dir, "target")
	id, vctx := publishedVolumeOf(t, env, &csi.CreateVolumeRequest{
		Name: "pvc-no-quota", Parameters: map[string]string{volume.ParamEnforceCapacity: "false"},
		CapacityRange: &csi.CapacityRange{RequiredBytes: mib},
	}, filepath.Join(env.Dir, "staging"), map[string]bool{target: false})
	if _, ok := vctx[volume.ParamCapacityBytes]; ok {
		t.Fatalf("volume context %v carries a size to enforce", vctx)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), make([]byte, 2*mib), 0o644); err != nil {
		t.Fatalf("writing 2 MiB into a 1 MiB volume that enforces nothing: %v", err)
	}
	if total, _ := bytesOf(t, env, id, target); total < 1<<50 {
		t.Fatalf("NodeGetVolumeStats shows %d bytes; a volume without a quota is unlimited", total)
	}
	_, err := env.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "pvc-sized-by-class", Parameters: map[string]string{volume.ParamCapacityBytes: "1000"},
		VolumeCapabilities: mountCap(), Secrets: env.Secrets,
	})
	if s := status.Convert(err); s.Code() != codes.InvalidArgument {
		t.Fatalf("a StorageClass setting capacityBytes: %v, want InvalidArgument", err)
	}
	_, err = env.Controller.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
		VolumeId: id + "x", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * mib}, Secrets: env.Secrets,
	})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("expanding a volume that does not exist: %v, want NotFound", err)
	}
}
