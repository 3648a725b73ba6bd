package driver_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/objfuse/objfuse/driver"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
)

// The node refuses an inline volume its allow-list does not cover, or
// that names no Secret or endpoint, with a code and a message for the
// pod's Events (kubelet's FailedMount), and mounts nothing; an allowed
// one waits for the controller's mounter, and says so when none comes.
func TestNodeRefusesInlineVolumesItDoesNotAllow(t *testing.T) {
	dir := t.TempDir()
	allow := filepath.Join(dir, "inline-allow.yaml")
	if err := os.WriteFile(allow, []byte("- {namespace: team-a, endpoint: 'http://s3:9000', bucket: allowed, prefix: jobs}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fm := &mounts.Fake{}
	d, err := driver.New(driver.Options{Mode: driver.ModeNode, NodeID: "node-a", KubeletDir: filepath.Join(dir, "kubelet"), StateDir: filepath.Join(dir, "state"),
		Mounts: fm, KubeClient: fake.NewSimpleClientset(), InlineAllowFile: allow, MounterWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{"accessKeyID": "AK", "secretAccessKey": "SK"}
	publish := func(ns string, attrs, secrets map[string]string) error {
		vc := map[string]string{"csi.storage.k8s.io/ephemeral": "true", "csi.storage.k8s.io/pod.namespace": ns, "csi.storage.k8s.io/pod.name": "app"}
		for k, v := range attrs {
			vc[k] = v
		}
		_, err := driver.Node(d).NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
			VolumeId: "csi-0123", TargetPath: filepath.Join(dir, "target"), VolumeCapability: mountCap()[0], VolumeContext: vc, Secrets: secrets,
		})
		return err
	}
	allowed := map[string]string{"endpoint": "http://s3:9000", "bucket": "allowed", "prefix": "jobs/7"}
	for _, c := range []struct {
		what    string
		ns      string
		attrs   map[string]string
		secrets map[string]string
		code    codes.Code
		says    string
	}{
		{"a namespace with no rule", "team-b", allowed, keys, codes.PermissionDenied, `namespace "team-b" may not declare objfuse volumes inline`},
		{"a prefix its rule does not cover", "team-a", map[string]string{"endpoint": "http://s3:9000", "bucket": "allowed", "prefix": "other"}, keys, codes.PermissionDenied, `only bucket "allowed" under prefix "jobs/"`},
		{"another endpoint", "team-a", map[string]string{"endpoint": "http://elsewhere:9000", "bucket": "allowed", "prefix": "jobs"}, keys, codes.PermissionDenied, "not bucket"},
		{"no endpoint", "team-a", map[string]string{"bucket": "allowed"}, keys, codes.InvalidArgument, "endpoint"},
		{"a mounter of its own choosing", "team-a", map[string]string{"endpoint": "http://s3:9000", "bucket": "allowed", "prefix": "jobs", "mounterNamespace": "team-a"}, keys, codes.InvalidArgument, "mounterNamespace"},
		{"no Secret", "team-a", allowed, nil, codes.InvalidArgument, "nodePublishSecretRef"},
		{"no mounter from the controller", "team-a", allowed, keys, codes.Unavailable, "has not started this inline volume's mounter"},
	} {
		s := status.Convert(publish(c.ns, c.attrs, c.secrets))
		if s.Code() != c.code || !strings.Contains(s.Message(), c.says) {
			t.Errorf("%s: %v %q, want %v saying %q", c.what, s.Code(), s.Message(), c.code, c.says)
		}
	}
	if got := fm.Calls; len(got) != 0 {
		t.Errorf("refused inline volumes made mounts: %q", got)
	}
}
