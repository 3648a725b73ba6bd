//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// TestRotatedCredentialsReachRunningMounts: the S3 keys are rotated (the
// server takes new ones, the StorageClass's Secret is updated) while a
// pod has the volume mounted. Writes fail while the mounter holds the old
// keys, then work again through the same mount and the same mounter pod,
// with no restart: the controller copies the new keys to the mounter.
func TestRotatedCredentialsReachRunningMounts(t *testing.T) {
	// Its own server, as the rotation must not touch the shared one; HTTPS
	// because StartTLS is the start that listens where pods reach it.
	srv := miniotest.StartTLS(t, hostAddr)
	s := newSuite(t)
	sc, secretName := s.storageClassWithSecret("rotating", srv.Endpoint, map[string]string{
		s3store.AccessKeyFile: miniotest.AccessKey, s3store.SecretKeyFile: miniotest.SecretKey, s3store.CABundleFile: string(srv.CA)})
	t.Cleanup(s.deleteNamespace) // before the Secret and the server go

	s.pvc("rotating", sc, corev1.ReadWriteMany)
	pv := s.boundPV("rotating")
	bucket, prefix := volume(pv)
	s.pod("app", "rotating", "exec sleep 3600", podOpts{})
	s.waitPod("app", corev1.PodRunning, 3*time.Minute)
	mounter := s.mounterPodOf(pv.Spec.CSI.VolumeHandle)
	write := func(name string) error {
		// dd's fsync reports a failed upload, which a shell's close would not.
		out, err := s.exec(s.ns, "app", "c", "sh", "-c", "echo "+name+" | dd of=/data/"+name+" conv=fsync")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := write("before"); err != nil {
		t.Fatalf("write with the first keys: %v", err)
	}

	srv.RestartWithCredentials("rotated-key", "rotated-secret-key")
	if err := write("stale"); err == nil {
		t.Fatal("a write with the old keys worked after the server's rotation")
	}
	// The pod's owner is told why, and where the keys go.
	s.eventFor(s.ns, "Pod", "app", "controller-publish-secret-name", time.Minute)
	secret, err := s.kc.CoreV1().Secrets(driverNS).Get(s.ctx(), secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data[s3store.AccessKeyFile], secret.Data[s3store.SecretKeyFile] = []byte("rotated-key"), []byte("rotated-secret-key")
	if _, err := s.kc.CoreV1().Secrets(driverNS).Update(s.ctx(), secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n := 0
	s.eventually(4*time.Minute, "a write with the rotated keys", func() (bool, error) {
		n++
		err := write(fmt.Sprintf("after-%d", n))
		return err == nil, err
	})
	t.Logf("writes work again %v after the Secret's update", time.Since(start).Round(time.Second))
	s.eventFor(s.ns, "Pod", "app", "S3 serves volume", time.Minute)
	key := fmt.Sprintf("%safter-%d", prefix, n)
	if _, err := srv.Client().StatObject(s.ctx(), bucket, key, minio.StatObjectOptions{}); err != nil {
		t.Fatalf("%s not in S3: %v", key, err)
	}
	if now := s.mounterPodOf(pv.Spec.CSI.VolumeHandle); now.UID != mounter.UID || now.Status.ContainerStatuses[0].RestartCount != mounter.Status.ContainerStatuses[0].RestartCount {
		t.Fatalf("the mounter was replaced or restarted (uid %s → %s)", mounter.UID, now.UID)
	}

	// A Secret that goes away cannot be synced: the PV says so, and says
	// when it can be again. (Put back, or the PVC's DeleteVolume fails.)
	if err := s.kc.CoreV1().Secrets(driverNS).Delete(s.ctx(), secretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventFor(metav1.NamespaceDefault, "PersistentVolume", pv.Name, secretName+`" not found`, time.Minute)
	secret.ResourceVersion = ""
	if _, err := s.kc.CoreV1().Secrets(driverNS).Create(s.ctx(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventFor(metav1.NamespaceDefault, "PersistentVolume", pv.Name, "can be used again", time.Minute)
}
