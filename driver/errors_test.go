package driver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/csitest"
)

func mountCap() []*csi.VolumeCapability {
	return []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}}
}

// Every user mistake gets the right code and a message naming the cause.
func TestUserMistakes(t *testing.T) {
	env := csitest.Start(t, csitest.Options{})
	good := env.Secrets
	wrongCreds := map[string]string{s3store.AccessKeyFile: "nobody-knows-me", s3store.SecretKeyFile: "wrong-secret"}
	noSecretKey := map[string]string{s3store.AccessKeyFile: good[s3store.AccessKeyFile]}
	tests := []struct {
		name    string
		params  map[string]string
		secrets map[string]string
		block   bool
		code    codes.Code
		says    []string
	}{
		{"unknown parameter", map[string]string{"bukket": "x"}, good, false, codes.InvalidArgument, []string{`"bukket"`, "unknown parameter"}},
		{"bad bucket name", map[string]string{"bucket": "Not_A_Bucket"}, good, false, codes.InvalidArgument, []string{`"bucket"`, "Not_A_Bucket", "lowercase"}},
		{"bad endpoint", map[string]string{"endpoint": "ftp://example"}, good, false, codes.InvalidArgument, []string{`"endpoint"`, "http://"}},
		{"bad boolean", map[string]string{"pathStyle": "yes please"}, good, false, codes.InvalidArgument, []string{`"pathStyle"`, "true or false"}},
		{"prefix escaping", map[string]string{"bucket": "shared", "prefix": "../etc"}, good, false, codes.InvalidArgument, []string{`"prefix"`, `".."`}},
		{"parts larger than memory", map[string]string{"partSizeMiB": "64", "memoryLimitMiB": "64"}, good, false, codes.InvalidArgument, []string{`"partSizeMiB"`, "two parts"}},
		{"bad file mode", map[string]string{"fileMode": "0999"}, good, false, codes.InvalidArgument, []string{`"fileMode"`, "octal"}},
		{"block volume", nil, good, true, codes.InvalidArgument, []string{"Block"}},
		{"secret without secret key", nil, noSecretKey, false, codes.InvalidArgument, []string{"secretAccessKey"}},
		// The driver has credentials of its own, which serve volumes only
		// when its admin says so.
		{"no secret", nil, nil, false, codes.InvalidArgument, []string{"no S3 credentials", "provisioner-secret-name", "--s3-credentials-for-volumes"}},
		{"wrong credentials", nil, wrongCreds, false, codes.PermissionDenied, []string{"does not know the access key (InvalidAccessKeyId)", "check accessKeyID and secretAccessKey in the Secret"}},
		{"unreachable endpoint", map[string]string{"endpoint": "http://127.0.0.1:1"}, good, false, codes.Unavailable, []string{"cannot reach S3 endpoint http://127.0.0.1:1"}},
		{"missing shared bucket", map[string]string{"bucket": "no-such-shared-bucket"}, good, false, codes.FailedPrecondition, []string{`"no-such-shared-bucket" does not exist`, "create it first"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			caps := mountCap()
			if tc.block {
				caps[0].AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
			}
			_, err := env.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
				Name: "pvc-mistake", VolumeCapabilities: caps, Parameters: tc.params, Secrets: tc.secrets,
			})
			s := status.Convert(err)
			if s.Code() != tc.code {
				t.Fatalf("code %s, want %s (%s)", s.Code(), tc.code, s.Message())
			}
			for _, w := range tc.says {
				if !strings.Contains(s.Message(), w) {
					t.Errorf("message %q does not say %q", s.Message(), w)
				}
			}
			if strings.Contains(s.Message(), "wrong-secret") || strings.Contains(s.Message(), csitest.SecretKey()) {
				t.Errorf("message leaks a secret: %q", s.Message())
			}
		})
	}
}

// A volume whose bucket vanished is NotFound at publish, naming the bucket.
func TestPublishOfVanishedBucket(t *testing.T) {
	env := csitest.Start(t, csitest.Options{})
	ctx := context.Background()
	vol, err := env.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-publish-fail", VolumeCapabilities: mountCap(), Secrets: env.Secrets})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	bucket := vol.GetVolume().GetVolumeContext()["bucket"]
	if err := env.MinIO.Client().RemoveBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	_, err = env.Controller.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
		VolumeId: id, NodeId: csitest.NodeID, VolumeCapability: mountCap()[0], Secrets: env.Secrets,
	})
	if s := status.Convert(err); s.Code() != codes.NotFound || !strings.Contains(s.Message(), bucket) {
		t.Fatalf("publish of a volume whose bucket is gone: %v", err)
	}
}

// A bucket outside the region requests are signed for (us-east-1 when
// the StorageClass says none) is InvalidArgument, naming the region to set.
func TestWrongRegion(t *testing.T) {
	env := csitest.Start(t, csitest.Options{MinIORegion: "eu-west-1"})
	req := func(params map[string]string) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{Name: "pvc-region", VolumeCapabilities: mountCap(), Parameters: params, Secrets: env.Secrets}
	}
	_, err := env.Controller.CreateVolume(context.Background(), req(nil))
	s := status.Convert(err)
	if s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), `set the StorageClass parameter "region" (objfuse-mount: --region) to eu-west-1`) {
		t.Fatalf("create volume without the region: %v", err)
	}
	if _, err := env.Controller.CreateVolume(context.Background(), req(map[string]string{"region": "eu-west-1"})); err != nil {
		t.Fatalf("create volume with the region: %v", err)
	}
}

// With --s3-credentials-for-volumes, a request that carries no secrets
// uses the driver's own credentials (TestUserMistakes: refused without).
func TestDefaultCredentialsServeVolumesWhenAllowed(t *testing.T) {
	env := csitest.Start(t, csitest.Options{DefaultCredentialsForVolumes: true})
	resp, err := env.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "pvc-default-creds", VolumeCapabilities: mountCap(),
	})
	if err != nil {
		t.Fatalf("CreateVolume without secrets: %v", err)
	}
	bucket := resp.GetVolume().GetVolumeContext()["bucket"]
	if ok, err := env.MinIO.Client().BucketExists(context.Background(), bucket); err != nil || !ok {
		t.Fatalf("bucket %q of the volume: exists %v, %v", bucket, ok, err)
	}
}
