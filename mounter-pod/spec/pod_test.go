package spec_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

// A mounter on the pod network serves metrics on its pod IP, announced to
// Prometheus, unless the template turns them off; one on the host network
// serves none (a fixed port would clash between mounters). The flag must come before the source, where
// objfuse-mount still reads flags.
func TestMounterPodMetrics(t *testing.T) {
	m := spec.Mounter{VolumeID: "v", NodeID: "n", Volume: volume.Volume{
		ID: volume.ID{S3: volume.S3{Endpoint: "http://s3:9000", Region: "us-east-1"}, Bucket: "bucket-1"},
	}}
	tests := []struct {
		name     string
		template spec.Template
		want     bool
	}{
		{"pod network", spec.Template{Image: "i"}, true},
		{"host network", spec.Template{Image: "i", HostNetwork: true}, false},
		{"turned off", spec.Template{Image: "i", NoMetrics: true}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod, err := tc.template.Pod(m, "ns", "host")
			if err != nil {
				t.Fatal(err)
			}
			c := pod.Spec.Containers[0]
			if last := c.Args[len(c.Args)-1]; last != m.Volume.Source() {
				t.Errorf("last argument %q, want the source %q", last, m.Volume.Source())
			}
			// Every pod's mounter is told its drain timeout (TestMounterDrainTimeout).
			args := slices.DeleteFunc(slices.Clone(c.Args), func(a string) bool { return strings.HasPrefix(a, "--drain-timeout=") })
			if want := m.Args(spec.SocketPath, spec.CredentialsDir, spec.StagingDir); !tc.want && !slices.Equal(args, want) {
				t.Errorf("args %q, want %q", args, want)
			}
			served := slices.Contains(c.Args, "--metrics-addr=:9810")
			ported := len(c.Ports) == 1 && c.Ports[0].Name == "metrics" && c.Ports[0].ContainerPort == spec.MetricsPort
			announced := pod.Annotations["prometheus.io/scrape"] == "true" && pod.Annotations["prometheus.io/port"] == "9810"
			if served != tc.want || ported != tc.want || announced != tc.want {
				t.Errorf("metrics flag %v, port %v, annotations %v; want all %v", served, ported, announced, tc.want)
			}
		})
	}
}

// When the pod bounds its staging emptyDir (stagingSizeLimit, or an
// ephemeral-storage limit), objfuse-mount is told to stay within nine
// tenths of it (at least 64 MiB off), less the read cache's share, and
// never above its default: a full staging area must be ENOSPC to a
// writer, not the pod's eviction, which breaks the mount.
func TestMounterStagingLimit(t *testing.T) {
	tests := []struct {
		name       string
		sizeLimit  string
		ephemeral  string
		readCache  int    // -1: the volume does not say
		wantFlag   string // "" for none
		wantCache  string // the read cache flag, "" for none
		wantErrHas string
	}{
		{name: "unbounded", wantFlag: ""},
		{name: "zero sizeLimit is none", sizeLimit: "0", wantFlag: ""},
		{name: "sizeLimit", sizeLimit: "2Gi", wantFlag: "--staging-limit-mib=1844"},
		{name: "sizeLimit less the read cache", sizeLimit: "2Gi", readCache: 1024, wantFlag: "--staging-limit-mib=820"},
		{name: "ephemeral-storage limit", ephemeral: "1Gi", wantFlag: "--staging-limit-mib=922"},
		{name: "the smaller of both", sizeLimit: "1Gi", ephemeral: "10Gi", wantFlag: "--staging-limit-mib=922"},
		{name: "at least 64 MiB for logs", ephemeral: "500Mi", wantFlag: "--staging-limit-mib=436"},
		{name: "never above the default", sizeLimit: "100Gi", wantFlag: "--staging-limit-mib=10240"},
		{name: "no room beside the read cache", sizeLimit: "1Gi", readCache: 900, wantErrHas: "stagingSizeLimit 1Gi leaves 22 MiB for staging files beside readCacheMiB 900, and at least 64 are needed: raise it, or set readCacheMiB to at most 858"},
		{name: "the default read cache", sizeLimit: "2Gi", readCache: -1, wantFlag: "--staging-limit-mib=1588", wantCache: "--read-cache-mib=256"},
		{name: "the default read cache, a quarter of little room", ephemeral: "500Mi", readCache: -1, wantFlag: "--staging-limit-mib=327", wantCache: "--read-cache-mib=109"},
		{name: "the default read cache, unbounded", readCache: -1},
		{name: "the default read cache leaves the least staging space", ephemeral: "136Mi", readCache: -1, wantFlag: "--staging-limit-mib=64", wantCache: "--read-cache-mib=8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mount := volume.MountOptions{volume.ParamReadCacheMiB: strconv.Itoa(tc.readCache)}
			if tc.readCache < 0 {
				mount = volume.MountOptions{}
			}
			m := spec.Mounter{VolumeID: "v", NodeID: "n", Volume: volume.Volume{
				ID:    volume.ID{S3: volume.S3{Endpoint: "http://s3:9000", Region: "us-east-1"}, Bucket: "bucket-1"},
				Mount: mount,
			}}
			tmpl := spec.Template{Image: "i", StagingSizeLimit: tc.sizeLimit}
			if tc.ephemeral != "" {
				tmpl.Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse(tc.ephemeral)}
			}
			pod, err := tmpl.Pod(m, "ns", "host")
			if tc.wantErrHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrHas) {
					t.Fatalf("error %v, want one naming %q", err, tc.wantErrHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			args := pod.Spec.Containers[0].Args
			var got, cache string
			for _, a := range args {
				if strings.HasPrefix(a, "--staging-limit-mib=") {
					got = a
				}
				if strings.HasPrefix(a, "--read-cache-mib=") {
					cache = a
				}
			}
			if tc.readCache >= 0 { // the volume's own, passed on
				tc.wantCache = "--read-cache-mib=" + strconv.Itoa(tc.readCache)
			}
			if got != tc.wantFlag || cache != tc.wantCache {
				t.Fatalf("staging flags %q %q, want %q %q (args %q)", got, cache, tc.wantFlag, tc.wantCache, args)
			}
			if last := args[len(args)-1]; last != m.Volume.Source() {
				t.Errorf("last argument %q, want the source %q", last, m.Volume.Source())
			}
		})
	}
}

// A mounter pod's memory limit bounds what objfuse-mount keeps: of its
// GOMEMLIMIT (nine tenths of it) the Go runtime's share (48 MiB) comes
// off, the budget for written data, readahead and listings is
// objfuse-mount's default or half of the rest, and the inodes the kernel
// keeps looked up get what remains (2 KiB each); a volume's own
// memoryLimitMiB is kept as it is.
func TestMounterMemoryShare(t *testing.T) {
	tests := []struct {
		name         string
		limit        string // the pod's memory limit, "" for none
		mount        volume.MountOptions
		budget       string // the --memory-limit-mib flag, "" for none
		inodes       string // the --max-inodes flag, "" for none
		volumeBudget string // the volume's own --memory-limit-mib, passed on
	}{
		{name: "no limit: objfuse-mount's defaults", limit: ""},
		{name: "the default 256Mi", limit: "256Mi", budget: "--memory-limit-mib=64", inodes: "--max-inodes=60416"},
		{name: "128Mi: half of what the runtime leaves", limit: "128Mi", budget: "--memory-limit-mib=33", inodes: "--max-inodes=17408"},
		{name: "1Gi: the default budget, many inodes", limit: "1Gi", budget: "--memory-limit-mib=64", inodes: "--max-inodes=414208"},
		{name: "two parts at least", limit: "96Mi", mount: volume.MountOptions{volume.ParamPartSizeMiB: "16"}, budget: "--memory-limit-mib=32", inodes: "--max-inodes=3072"},
		{name: "the volume's own budget, too large for the pod", limit: "64Mi", mount: volume.MountOptions{volume.ParamMemoryLimitMiB: "1024"}, inodes: "--max-inodes=1000", volumeBudget: "--memory-limit-mib=1024"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := spec.Mounter{VolumeID: "v", NodeID: "n", Volume: volume.Volume{
				ID:    volume.ID{S3: volume.S3{Endpoint: "http://s3:9000", Region: "us-east-1"}, Bucket: "bucket-1"},
				Mount: tc.mount,
			}}
			tmpl := spec.Template{Image: "i"}
			if tc.limit != "" {
				tmpl.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(tc.limit)}
			}
			pod, err := tmpl.Pod(m, "ns", "host")
			if err != nil {
				t.Fatal(err)
			}
			args := pod.Spec.Containers[0].Args
			var budgets []string
			inodes := ""
			for _, a := range args {
				if strings.HasPrefix(a, "--memory-limit-mib=") {
					budgets = append(budgets, a)
				}
				if strings.HasPrefix(a, "--max-inodes=") {
					inodes = a
				}
			}
			want := []string{}
			for _, b := range []string{tc.volumeBudget, tc.budget} {
				if b != "" {
					want = append(want, b)
				}
			}
			if strings.Join(budgets, " ") != strings.Join(want, " ") || inodes != tc.inodes {
				t.Fatalf("memory flags %q %q, want %q %q (args %q)", budgets, inodes, want, tc.inodes, args)
			}
			if last := args[len(args)-1]; last != m.Volume.Source() {
				t.Errorf("last argument %q, want the source %q", last, m.Volume.Source())
			}
		})
	}
}

// TestMounterDrainTimeout: a deleted mounter's pending uploads get the
// pod's grace period less the time to report what they could not upload.
func TestMounterDrainTimeout(t *testing.T) {
	tests := []struct {
		name  string
		grace *int64
		want  string
	}{
		{name: "default grace", want: "--drain-timeout=50s"},
		{name: "long grace", grace: ptr.To[int64](330), want: "--drain-timeout=5m20s"},
		{name: "short grace", grace: ptr.To[int64](10), want: "--drain-timeout=5s"},
		{name: "no grace", grace: ptr.To[int64](0), want: "--drain-timeout=1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := spec.Mounter{VolumeID: "v", NodeID: "n", Volume: volume.Volume{
				ID: volume.ID{S3: volume.S3{Endpoint: "http://s3:9000", Region: "us-east-1"}, Bucket: "bucket-1"},
			}}
			pod, err := spec.Template{Image: "i", TerminationGracePeriodSeconds: tc.grace}.Pod(m, "ns", "host")
			if err != nil {
				t.Fatal(err)
			}
			args := pod.Spec.Containers[0].Args
			if !slices.Contains(args, tc.want) {
				t.Fatalf("args %q, want %q", args, tc.want)
			}
			if last := args[len(args)-1]; last != m.Volume.Source() {
				t.Errorf("last argument %q, want the source %q", last, m.Volume.Source())
			}
		})
	}
}
