//go:build e2e

package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// TestHTTPSEndpointWithPrivateCA: an S3 endpoint serving HTTPS with a
// certificate from a private CA (an in-cluster MinIO with cert-manager's
// certificates, say). With the CA in the credentials Secret (key
// caBundle), the controller makes the bucket and a pod writes and reads
// through the mounter over HTTPS; without it, the PVC stays Pending with
// an Event that says where the CA goes.
func TestHTTPSEndpointWithPrivateCA(t *testing.T) {
	srv := miniotest.StartTLS(t, hostAddr)
	s := newSuite(t)
	// Volumes go before the server and the Secrets do: deleting them
	// needs both. (Cleanups run last registered first.)
	keys := map[string]string{s3store.AccessKeyFile: miniotest.AccessKey, s3store.SecretKeyFile: miniotest.SecretKey}
	withCA := map[string]string{s3store.CABundleFile: string(srv.CA)}
	for k, v := range keys {
		withCA[k] = v
	}
	trusted, _ := s.storageClassWithSecret("tls", srv.Endpoint, withCA)
	untrusted, _ := s.storageClassWithSecret("untrusted", srv.Endpoint, keys)
	t.Cleanup(s.deleteNamespace)

	s.pvc("untrusted", untrusted, corev1.ReadWriteMany)
	s.pvc("tls", trusted, corev1.ReadWriteMany)
	bucket, prefix := volume(s.boundPV("tls"))
	// An object put straight into S3, for the pod to read over HTTPS.
	c := srv.Client()
	fromS3 := make([]byte, 3<<20)
	rand.Read(fromS3)
	if _, err := c.PutObject(s.ctx(), bucket, prefix+"from-s3.bin", bytes.NewReader(fromS3), int64(len(fromS3)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	s.pod("writer", "tls", writeScript+`; sha256sum /data/from-s3.bin | cut -d' ' -f1`, podOpts{})
	sums := strings.Fields(s.waitPod("writer", corev1.PodSucceeded, 3*time.Minute))
	if len(sums) != 2 {
		t.Fatalf("writer printed %q, want two checksums", sums)
	}
	s.s3 = c // objectSum reads from this test's server
	if got := s.objectSum(bucket, prefix+"file.bin"); got != sums[0] {
		t.Fatalf("object checksum %s, pod wrote %s", got, sums[0])
	}
	if want := sha256.Sum256(fromS3); sums[1] != hex.EncodeToString(want[:]) {
		t.Fatalf("pod read from-s3.bin with checksum %s, want %x", sums[1], want)
	}

	s.eventFor(s.ns, "PersistentVolumeClaim", "untrusted", "not a trusted CA", 60*time.Second)
	s.eventFor(s.ns, "PersistentVolumeClaim", "untrusted", `key "caBundle"`, 10*time.Second)
}
