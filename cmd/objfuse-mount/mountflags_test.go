package main

import (
	"io"
	"os"
	"testing"
	"time"

	"github.com/objfuse/objfuse/mounter-pod/serve"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

// Every mount option a StorageClass sets reaches the filesystem of the
// mounter it makes: parsed from the parameters, carried on the mounter's
// command line (spec), and taken by objfuse-mount's flags, all from the
// one table. An option added to the table without a value here fails.
func TestEveryStorageClassOptionReachesTheFilesystem(t *testing.T) {
	params := map[string]string{
		volume.ParamUID: "1000", volume.ParamGID: "2000", volume.ParamFileMode: "600", volume.ParamDirMode: "0700",
		volume.ParamStatTTL: "3s", volume.ParamListTTL: "4000ms", volume.ParamAsyncClose: "true",
		volume.ParamBatchSmallUploads: "false", volume.ParamPartSizeMiB: "16", volume.ParamConcurrency: "7",
		volume.ParamMemoryLimitMiB: "256", volume.ParamReadCacheMiB: "32", volume.ParamTakeover: "false",
		volume.ParamCapacityBytes: "67108864", volume.ParamWritebackCache: "true",
	}
	want := func(c *serve.Config) map[string]bool {
		return map[string]bool{
			volume.ParamUID: c.FS.UID == 1000, volume.ParamGID: c.FS.GID == 2000,
			volume.ParamFileMode: c.FS.FileMode == 0o600, volume.ParamDirMode: c.FS.DirMode == 0o700,
			volume.ParamStatTTL: c.FS.StatTTL == 3*time.Second, volume.ParamListTTL: c.FS.ListTTL == 4*time.Second,
			volume.ParamAsyncClose: c.FS.AsyncClose, volume.ParamBatchSmallUploads: c.S3.NoBatching,
			volume.ParamPartSizeMiB: c.FS.PartSize == 16<<20, volume.ParamConcurrency: c.FS.Concurrency == 7,
			volume.ParamMemoryLimitMiB: c.FS.MemoryLimit == 256<<20, volume.ParamReadCacheMiB: c.FS.ReadCacheSize == 32<<20,
			volume.ParamTakeover: !c.Takeover, volume.ParamCapacityBytes: c.FS.Capacity == 64<<20,
			volume.ParamWritebackCache: c.FS.WritebackCache,
		}
	}
	for _, o := range volume.MountOptionTable {
		if _, ok := params[o.Param]; !ok {
			t.Fatalf("option %q has no value in this test", o.Param)
		}
	}
	params[volume.ParamEndpoint] = "http://127.0.0.1:9000"
	p, err := volume.ParseParams(params, volume.Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	m := spec.Mounter{VolumeID: "v", NodeID: "n", Volume: volume.Volume{ID: volume.ID{S3: p.S3, Bucket: "bucket-1"}, Mount: p.Mount}}
	o, err := parse(m.Args(t.TempDir()+"/sock", t.TempDir(), t.TempDir()), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for param, ok := range want(&o.cfg) {
		if !ok {
			t.Errorf("%s=%s did not reach the filesystem: %+v", param, params[param], o.cfg.FS)
		}
	}

	// With none given, each takes its default; the owner is objfuse-mount's user.
	o, err = parse([]string{"--handoff", t.TempDir() + "/sock", "bucket-1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg.FS
	if c.UID != uint32(os.Getuid()) || c.FileMode != 0o644 || c.StatTTL != time.Second || c.PartSize != 8<<20 || c.AsyncClose || c.WritebackCache || o.cfg.S3.NoBatching {
		t.Errorf("defaults: %+v, batching off %v", c, o.cfg.S3.NoBatching)
	}
}

// The read cache is on by default, but not for a mounter pod made before
// it was, which names a staging limit and no cache: that limit is all its
// emptyDir leaves (kubelet evicts the pod past its bound), and an
// upgrade in place keeps the pod's arguments.
func TestTheDefaultReadCacheFitsTheStagingLimitItWasGiven(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int64
	}{
		{nil, 256 << 20},
		{[]string{"--staging-limit-mib=1844"}, 0},
		{[]string{"--staging-limit-mib=1588", "--read-cache-mib=256"}, 256 << 20},
		{[]string{"--read-cache-mib=0"}, 0},
	} {
		o, err := parse(append(append([]string{"--handoff", t.TempDir() + "/sock"}, c.args...), "bucket-1"), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.cfg.FS.ReadCacheSize; got != c.want {
			t.Errorf("%q: read cache %d bytes, want %d", c.args, got, c.want)
		}
	}
}
