package driver_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/minio/minio-go/v7"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/csitest"
)

// An S3 endpoint serving HTTPS with a private CA's certificate: the CA
// given in the credentials Secret or as the driver's --ca-bundle reaches
// both the controller and the mounter, and a file written through the
// mount is in S3.
func TestHTTPSEndpointWithPrivateCA(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts csitest.Options
	}{
		{"CA in the Secret", csitest.Options{TLS: true}},
		{"CA from the driver's --ca-bundle", csitest.Options{TLS: true, DriverCABundle: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := csitest.Start(t, tc.opts)
			if _, inSecret := env.Secrets[s3store.CABundleFile]; inSecret == tc.opts.DriverCABundle {
				t.Fatalf("secrets carry a CA: %v, want %v", inSecret, !tc.opts.DriverCABundle)
			}
			target := filepath.Join(env.Dir, "pods", "a", "mount")
			_, vctx := publishedVolume(t, env, "pvc-https", filepath.Join(env.Dir, "staging"), map[string]bool{target: false})
			data := bytes.Repeat([]byte("over https\n"), 2<<20) // 22 MiB: a multipart upload
			if err := os.WriteFile(filepath.Join(target, "f"), data, 0o644); err != nil {
				t.Fatalf("write through the mount: %v", err)
			}
			if got, err := os.ReadFile(filepath.Join(target, "f")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back through the mount: %d bytes, %v", len(got), err)
			}
			obj, err := env.MinIO.Client().GetObject(context.Background(), vctx["bucket"], "f", minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(obj)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("f in S3: %d bytes, %v", len(got), err)
			}
		})
	}
}

// Without the CA, the controller refuses with FailedPrecondition and says
// where the CA goes; the sidecar puts that on the PVC as an event.
func TestHTTPSEndpointWithoutCA(t *testing.T) {
	env := csitest.Start(t, csitest.Options{TLS: true})
	secrets := map[string]string{}
	for k, v := range env.Secrets {
		if k != s3store.CABundleFile {
			secrets[k] = v
		}
	}
	_, err := env.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "pvc-untrusted", VolumeCapabilities: mountCap(), Secrets: secrets,
	})
	s := status.Convert(err)
	if s.Code() != codes.FailedPrecondition {
		t.Fatalf("code %s, want FailedPrecondition (%s)", s.Code(), s.Message())
	}
	for _, want := range []string{env.MinIO.Endpoint, "not a trusted CA", `key "caBundle"`, "--ca-bundle"} {
		if !strings.Contains(s.Message(), want) {
			t.Errorf("message %q does not say %q", s.Message(), want)
		}
	}
}
