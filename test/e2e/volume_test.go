//go:build e2e

package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

const mounterSelector = "app.kubernetes.io/component=mounter"

// writeScript writes 4 MiB of pseudo-random data and prints its sha256.
const writeScript = `set -e; head -c 4194304 /dev/urandom > /data/file.bin; sha256sum /data/file.bin | cut -d' ' -f1`

// mounterPodList lists the mounter pods in the driver's namespace.
func (s *suite) mounterPodList() []corev1.Pod {
	s.t.Helper()
	pods, err := s.kc.CoreV1().Pods(driverNS).List(s.ctx(), metav1.ListOptions{LabelSelector: mounterSelector})
	if err != nil {
		s.t.Fatal(err)
	}
	return pods.Items
}

// mounterPodOf is the live mounter pod of a volume.
func (s *suite) mounterPodOf(handle string) *corev1.Pod {
	s.t.Helper()
	for _, p := range s.mounterPodList() {
		if p.Annotations[spec.AnnotationVolume] == handle && p.DeletionTimestamp == nil {
			return &p
		}
	}
	s.t.Fatalf("no mounter pod for %s", handle)
	return nil
}

func (s *suite) mounterPods() int {
	s.t.Helper()
	n := 0
	for _, p := range s.mounterPodList() {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

func TestDynamicBucketPerVolume(t *testing.T) {
	s := newSuite(t)
	before := s.mounterPods()
	s.pvc("data", scBucket, corev1.ReadWriteMany)
	pv := s.boundPV("data")
	bucket, prefix := volume(pv)
	if ok, err := s.s3.BucketExists(s.ctx(), bucket); err != nil || !ok {
		t.Fatalf("bucket %s for %s: %v %v", bucket, pv.Name, ok, err)
	}
	s.pod("writer", "data", writeScript, podOpts{})
	sum := strings.TrimSpace(s.waitPod("writer", corev1.PodSucceeded, 3*time.Minute))
	if got := s.objectSum(bucket, prefix+"file.bin"); got != sum {
		t.Fatalf("object checksum %s, pod wrote %s", got, sum)
	}
	if s.mounterPods() != before+1 {
		t.Fatalf("mounter pods: %d, want %d", s.mounterPods(), before+1)
	}
	// Deleting pod and PVC removes the bucket, the mounter pod and the attachment.
	s.kc.CoreV1().Pods(s.ns).Delete(s.ctx(), "writer", metav1.DeleteOptions{})
	s.kc.CoreV1().PersistentVolumeClaims(s.ns).Delete(s.ctx(), "data", metav1.DeleteOptions{})
	s.eventually(3*time.Minute, "the bucket to be deleted", func() (bool, error) {
		ok, err := s.s3.BucketExists(s.ctx(), bucket)
		return !ok && err == nil, err
	})
	s.eventually(2*time.Minute, "the mounter pod to go", func() (bool, error) { return s.mounterPods() == before, nil })
	s.eventually(2*time.Minute, "the VolumeAttachment to go", func() (bool, error) {
		vas, err := s.kc.StorageV1().VolumeAttachments().List(s.ctx(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, va := range vas.Items {
			if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv.Name {
				return false, nil
			}
		}
		return true, nil
	})
}

func TestPrefixInSharedBucket(t *testing.T) {
	s := newSuite(t)
	s.pvc("shared", scShared, corev1.ReadWriteMany)
	pv := s.boundPV("shared")
	bucket, prefix := volume(pv)
	if bucket != sharedBucket || prefix == "" {
		t.Fatalf("volume %s is not a prefix of bucket %s", pv.Spec.CSI.VolumeHandle, sharedBucket)
	}
	s.pod("writer", "shared", writeScript, podOpts{})
	sum := strings.TrimSpace(s.waitPod("writer", corev1.PodSucceeded, 3*time.Minute))
	if got := s.objectSum(bucket, prefix+"file.bin"); got != sum {
		t.Fatalf("checksum %s, want %s", got, sum)
	}
}

func TestStaticVolumeOnExistingBucket(t *testing.T) {
	s := newSuite(t)
	bucket := "e2e-static-" + fmt.Sprint(time.Now().Unix())
	if err := s.s3.MakeBucket(s.ctx(), bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for o := range s.s3.ListObjects(s.ctx(), bucket, minio.ListObjectsOptions{Recursive: true}) {
			s.s3.RemoveObject(s.ctx(), bucket, o.Key, minio.RemoveObjectOptions{})
		}
		s.s3.RemoveBucket(s.ctx(), bucket)
	})
	data := []byte("already here\n")
	if _, err := s.s3.PutObject(s.ctx(), bucket, "existing.txt", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	// A larger object, read sequentially through the unprivileged mounter
	// pod: its readahead goes through pipes.
	big := make([]byte, 24<<20)
	rand.Read(big)
	if _, err := s.s3.PutObject(s.ctx(), bucket, "big.bin", bytes.NewReader(big), int64(len(big)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	bigSum := fmt.Sprintf("%x", sha256.Sum256(big))
	sc, err := s.kc.StorageV1().StorageClasses().Get(s.ctx(), scBucket, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvName := s.ns + "-static"
	// With a read cache, in the mounter's staging emptyDir, as nobody.
	attrs := map[string]string{"bucket": bucket, "readCacheMiB": "64"}
	for k, v := range sc.Parameters {
		if !strings.HasPrefix(k, "csi.storage.k8s.io/") {
			attrs[k] = v
		}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: mustQuantity("1Gi")},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			ClaimRef:                      &corev1.ObjectReference{Namespace: s.ns, Name: "static"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver:                     "objfuse.csi.io",
				VolumeHandle:               bucket,
				VolumeAttributes:           attrs,
				ControllerPublishSecretRef: &corev1.SecretReference{Name: sc.Parameters["csi.storage.k8s.io/controller-publish-secret-name"], Namespace: sc.Parameters["csi.storage.k8s.io/controller-publish-secret-namespace"]},
			}},
		},
	}
	if _, err := s.kc.CoreV1().PersistentVolumes().Create(s.ctx(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kc.CoreV1().PersistentVolumes().Delete(s.ctx(), pvName, metav1.DeleteOptions{}) })
	empty := ""
	_, err = s.kc.CoreV1().PersistentVolumeClaims(s.ns).Create(s.ctx(), &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "static"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: &empty,
			VolumeName:       pvName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: mustQuantity("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A random read (cached by the mounter), then the whole file.
	pageSum := fmt.Sprintf("%x", sha256.Sum256(big[1000*4096:1001*4096]))
	s.pod("reader", "static", "cat /data/existing.txt; dd if=/data/big.bin bs=4096 skip=1000 count=1 2>/dev/null | sha256sum | cut -d' ' -f1; sha256sum /data/big.bin | cut -d' ' -f1", podOpts{})
	// The local cluster's template bounds the staging emptyDir at 2Gi: the
	// mounter stays within it, less a tenth and the 64 MiB read cache.
	// Looked at while the reader runs: once it is done, the volume is
	// detached and the mounter goes.
	s.eventually(3*time.Minute, "the static volume's mounter pod", func() (bool, error) {
		pods, err := s.kc.CoreV1().Pods(driverNS).List(s.ctx(), metav1.ListOptions{LabelSelector: mounterSelector})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Annotations[spec.AnnotationVolume] != bucket {
				continue
			}
			if args := p.Spec.Containers[0].Args; !slices.Contains(args, "--staging-limit-mib=1780") {
				t.Fatalf("mounter %s runs with %q, want --staging-limit-mib=1780", p.Name, args)
			}
			return true, nil
		}
		return false, nil
	})
	if out, want := s.waitPod("reader", corev1.PodSucceeded, 3*time.Minute), string(data)+pageSum+"\n"+bigSum+"\n"; out != want {
		t.Fatalf("pod read %q, want %q", out, want)
	}
}

func TestTwoPodsShareOneMounter(t *testing.T) {
	s := newSuite(t)
	node := s.readyNodes(1)[0]
	s.pvc("both", scBucket, corev1.ReadWriteMany)
	pv := s.boundPV("both")
	s.pod("a", "both", "echo a > /data/a; sleep 3600", podOpts{nodeSelector: onNode(node)})
	s.pod("b", "both", "echo b > /data/b; sleep 3600", podOpts{nodeSelector: onNode(node)})
	s.waitPod("a", corev1.PodRunning, 3*time.Minute)
	s.waitPod("b", corev1.PodRunning, 3*time.Minute)
	s.expectVolumeOn(pv, node)
}

func TestReadOnlyRefusesWrites(t *testing.T) {
	s := newSuite(t)
	s.pvc("ro", scBucket, corev1.ReadWriteMany)
	s.boundPV("ro")
	s.pod("ro", "ro", `if err=$( (echo x > /data/x) 2>&1 ); then echo WROTE; else echo "$err"; fi`, podOpts{readOnly: true})
	out := s.waitPod("ro", corev1.PodSucceeded, 3*time.Minute)
	if strings.Contains(out, "WROTE") || !strings.Contains(strings.ToLower(out), "read-only") {
		t.Fatalf("write on a read-only mount: %q", out)
	}
}

func TestNonRootWithFSGroup(t *testing.T) {
	s := newSuite(t)
	s.pvc("nr", scBucket, corev1.ReadWriteMany)
	s.boundPV("nr")
	uid, gid := int64(1000), int64(2000)
	s.pod("nr", "nr", `set -e; echo hello > /data/h; cat /data/h; mkdir /data/d; echo x > /data/d/y; cat /data/d/y`, podOpts{runAsUser: &uid, fsGroup: &gid})
	if out := s.waitPod("nr", corev1.PodSucceeded, 3*time.Minute); out != "hello\nx\n" {
		t.Fatalf("non-root pod printed %q", out)
	}
}

// TestWrongCredentials: a StorageClass whose secret is wrong leaves the
// PVC Pending with an Event that names the cause.
func TestWrongCredentials(t *testing.T) {
	s := newSuite(t)
	sc, _ := s.storageClassWithSecret("wrong", "", map[string]string{"accessKeyID": "nobody", "secretAccessKey": "wrong-secret"})
	s.pvc("wrong", sc, corev1.ReadWriteMany)
	s.eventFor(s.ns, "PersistentVolumeClaim", "wrong", "InvalidAccessKeyId", 60*time.Second)
}

// TestBadParameter: an unknown StorageClass parameter is named in an Event.
func TestBadParameter(t *testing.T) {
	s := newSuite(t)
	sc := s.storageClassVariant("bad", func(sc *storagev1.StorageClass) { sc.Parameters["bogusParameter"] = "1" })
	s.pvc("bad", sc, corev1.ReadWriteMany)
	s.eventFor(s.ns, "PersistentVolumeClaim", "bad", "bogusParameter", 60*time.Second)
}

// TestNodePluginRestartKeepsStreaming: a pod streams writes while the
// node plugin pod is deleted; the stream sees no error and the data is complete.
func TestNodePluginRestartKeepsStreaming(t *testing.T) {
	s := newSuite(t)
	s.streamThrough(func(string) {
		nodes, err := s.kc.CoreV1().Pods(driverNS).List(s.ctx(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=objfuse-node"})
		if err != nil || len(nodes.Items) == 0 {
			t.Fatalf("node plugin pods: %v", err)
		}
		for _, p := range nodes.Items {
			if err := s.kc.CoreV1().Pods(driverNS).Delete(s.ctx(), p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	})
}

// TestMounterKilledIsRepaired: the mounter process dies (SIGQUIT: a Go
// crash) while a pod uses the volume. Its container restarts, the node
// plugin mounts the volume again, a pod mounting it with HostToContainer
// propagation reads and sees new data through it again, and gets an Event.
// healScript writes /data/before, then waits (3 minutes at most) until
// it reads back and /data/after, which the test puts into S3, is there:
// what a pod sees of a mount broken and repaired under it.
const healScript = `set -e; echo before > /data/before
i=0; while [ $i -lt 360 ]; do
  if [ "$(cat /data/before 2>/dev/null)" = before ] && [ -e /data/after ]; then echo healed; exit 0; fi
  i=$((i+1)); sleep 0.5
done; echo never healed; exit 1`

// healingReader makes a PVC and a pod "reader" running healScript on it
// (seeing repaired mounts in place), and waits until its first file is in S3.
func (s *suite) healingReader(pvcName string) *corev1.PersistentVolume {
	s.t.Helper()
	return s.healingReaderOn(pvcName, scBucket)
}

// healingReaderOn is healingReader with the PVC in StorageClass sc.
func (s *suite) healingReaderOn(pvcName, sc string) *corev1.PersistentVolume {
	s.t.Helper()
	s.pvc(pvcName, sc, corev1.ReadWriteMany)
	pv := s.boundPV(pvcName)
	bucket, prefix := volume(pv)
	h2c := corev1.MountPropagationHostToContainer
	s.pod("reader", pvcName, healScript, podOpts{propagation: &h2c})
	s.waitPod("reader", corev1.PodRunning, 3*time.Minute)
	s.eventually(time.Minute, "before to reach S3", func() (bool, error) {
		_, err := s.s3.StatObject(s.ctx(), bucket, prefix+"before", minio.StatObjectOptions{})
		return err == nil, nil
	})
	return pv
}

// expectHealed puts the reader's /data/after into S3 and waits for the
// reader to see it, and its own file, through the volume's mount.
func (s *suite) expectHealed(pv *corev1.PersistentVolume) {
	s.t.Helper()
	bucket, prefix := volume(pv)
	data := []byte("after\n")
	if _, err := s.s3.PutObject(s.ctx(), bucket, prefix+"after", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		s.t.Fatal(err)
	}
	if out := s.waitPod("reader", corev1.PodSucceeded, 3*time.Minute); !strings.Contains(out, "healed") {
		s.t.Fatalf("reader: %q", out)
	}
}

func TestMounterKilledIsRepaired(t *testing.T) {
	s := newSuite(t)
	// Without takeover, as on a kernel that cannot resend (before 6.9):
	// the connection dies with the mounter and is mounted again.
	noTakeover := s.storageClassVariant("no-takeover", func(sc *storagev1.StorageClass) {
		sc.Parameters[volumeParamTakeover] = "false"
	})
	pv := s.healingReaderOn("heal", noTakeover)
	mounter := s.mounterPodOf(pv.Spec.CSI.VolumeHandle).Name
	// PID 1 ignores SIGKILL from inside its container; Go dies on SIGQUIT.
	if out, err := s.exec(driverNS, mounter, "mounter", "kill", "-QUIT", "1"); err != nil {
		t.Fatalf("kill the mounter: %v %s", err, out)
	}
	s.expectHealed(pv)
	s.eventFor(s.ns, "Pod", "reader", "re-mounted the volume", 2*time.Minute)
	// And the pods are told why the connection was not taken over.
	s.eventFor(s.ns, "Pod", "reader", "cannot resume the connection", time.Minute)
}

// volumeParamTakeover is the StorageClass parameter volume.ParamTakeover.
const volumeParamTakeover = "takeover"

// TestMounterKilledIsTakenOver: the mounter dies (SIGQUIT: a Go crash)
// while one pod appends and fsyncs lines and another reads the file, both
// without mount propagation. The node kept the FUSE connection; the
// restarted mounter takes it over: neither pod sees an error, no container
// restarts, every fsynced line is in S3, and the pods get an Event. The
// kill comes while the writer has nothing unflushed (it waits, polling the
// mount, between two lines): writes a dead mounter held in memory fail
// with EIO, which cmd/objfuse-mount's TestTakeoverAfterSIGKILL counts at
// random moments; here no call may fail.
func TestMounterKilledIsTakenOver(t *testing.T) {
	s := newSuite(t)
	s.survives(true, func(mounter *corev1.Pod) {
		if out, err := s.exec(driverNS, mounter.Name, "mounter", "kill", "-QUIT", "1"); err != nil {
			t.Fatalf("kill the mounter: %v %s", err, out)
		}
	})
}

// TestMounterOOMKilledIsTakenOver: the mounter's memory limit is far
// below what its volume lets it buffer, and a third pod writes a large
// file fast: the kernel's OOM killer ends the mounter. That pod's write
// fails (what it wrote was in the dead mounter's memory); the writer (with
// nothing unflushed) and the reader carry on without an error.
func TestMounterOOMKilledIsTakenOver(t *testing.T) {
	s := newSuite(t)
	small := s.storageClassVariant("oom", func(sc *storagev1.StorageClass) {
		sc.Parameters["mounterMemoryLimit"] = "64Mi"
		sc.Parameters["memoryLimitMiB"] = "1024"
		sc.Parameters["partSizeMiB"] = "32"
		sc.Parameters["concurrency"] = "8"
		sc.Parameters["enforceCapacity"] = "false" // the hog writes the PVC's 1Gi and more
	})
	s.survivesOn(small, true, func(mounter *corev1.Pod) {
		s.pod("hog", "survive", `dd if=/dev/zero of=/data/big bs=4M count=256; echo "dd exit $?"`, podOpts{nodeSelector: onNode(mounter.Spec.NodeName)})
		s.eventually(3*time.Minute, "the OOM killer to end the mounter", func() (bool, error) {
			p, err := s.kc.CoreV1().Pods(driverNS).Get(s.ctx(), mounter.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range p.Status.ContainerStatuses {
				if last := c.LastTerminationState.Terminated; c.Name == "mounter" && last != nil {
					if last.Reason != "OOMKilled" {
						t.Fatalf("the mounter ended otherwise: %s, exit %d", last.Reason, last.ExitCode)
					}
					return true, nil
				}
			}
			return false, nil
		})
	})
}

// survives runs disrupt on the mounter while one pod appends and fsyncs
// lines and another reads the file, both without mount propagation, then
// checks neither saw an error or restarted, every line is in S3 once, and
// the writer was told the connection was taken over. With pause, disrupt
// comes while the writer has nothing unflushed (it waits between two
// lines, polling the mount).
func (s *suite) survives(pause bool, disrupt func(mounter *corev1.Pod)) {
	s.t.Helper()
	s.survivesOn(scBucket, pause, disrupt)
}

// survivesOn is survives with the volume in StorageClass sc.
func (s *suite) survivesOn(sc string, pause bool, disrupt func(mounter *corev1.Pod)) {
	t := s.t
	t.Helper()
	s.pvc("survive", sc, corev1.ReadWriteMany)
	pv := s.boundPV("survive")
	bucket, prefix := volume(pv)
	const lines = 80
	wait := ":"
	if pause {
		wait = "while [ ! -e /data/resume ]; do sleep 0.05; done"
	}
	s.pod("writer", "survive", fmt.Sprintf(`set -e; i=0; while [ $i -lt %d ]; do
  echo "line $i" >> /data/log.txt; sync /data/log.txt; i=$((i+1))
  if [ $i = 20 ]; then touch /data/paused; sync /data/paused; %s; fi
  sleep 0.1
done; echo done`, lines, wait), podOpts{})
	s.waitPod("writer", corev1.PodRunning, 3*time.Minute)
	w, err := s.kc.CoreV1().Pods(s.ns).Get(s.ctx(), "writer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// On the writer's node: one mounter serves both.
	s.pod("reader", "survive", `set -e; n=0; while [ ! -e /data/done ]; do if [ -e /data/log.txt ]; then cat /data/log.txt > /dev/null; fi; n=$((n+1)); sleep 0.02; done; echo "read $n times"`, podOpts{nodeSelector: onNode(w.Spec.NodeName)})
	s.waitPod("reader", corev1.PodRunning, 3*time.Minute)
	s.eventually(2*time.Minute, "the writer at its 20th line", func() (bool, error) {
		_, err := s.s3.StatObject(s.ctx(), bucket, prefix+"paused", minio.StatObjectOptions{})
		return err == nil, nil
	})
	mounter := s.mounterPodOf(pv.Spec.CSI.VolumeHandle)
	start := time.Now()
	disrupt(mounter)
	s.eventFor(s.ns, "Pod", "writer", "took the volume's connection over", 2*time.Minute)
	t.Logf("taken over: the Event came %v after the disruption began", time.Since(start).Round(time.Millisecond))
	put := func(key string) {
		b := []byte("x\n")
		if _, err := s.s3.PutObject(s.ctx(), bucket, prefix+key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put("resume")
	if out := s.waitPod("writer", corev1.PodSucceeded, 3*time.Minute); !strings.Contains(out, "done") {
		t.Fatalf("writer: %q", out)
	}
	put("done")
	if out := s.waitPod("reader", corev1.PodSucceeded, 3*time.Minute); !strings.Contains(out, "read ") {
		t.Fatalf("reader: %q", out)
	}
	o, err := s.s3.GetObject(s.ctx(), bucket, prefix+"log.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	var buf bytes.Buffer
	buf.ReadFrom(o)
	var want strings.Builder
	for i := range lines {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if buf.String() != want.String() {
		t.Fatalf("log in S3 is not the %d lines, each once: %q", lines, buf.String())
	}
	for _, name := range []string{"writer", "reader"} {
		p, err := s.kc.CoreV1().Pods(s.ns).Get(s.ctx(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.RestartCount > 0 {
				t.Errorf("%s restarted %d times", name, c.RestartCount)
			}
		}
	}
}

// TestUnknownEndpoint: a StorageClass naming an S3 endpoint nobody
// answers at leaves the PVC Pending with an Event saying so.
func TestUnknownEndpoint(t *testing.T) {
	s := newSuite(t)
	sc := s.storageClassVariant("nowhere", func(sc *storagev1.StorageClass) { sc.Parameters["endpoint"] = "http://127.0.0.1:1" })
	s.pvc("nowhere", sc, corev1.ReadWriteMany)
	s.eventFor(s.ns, "PersistentVolumeClaim", "nowhere", "cannot reach S3 endpoint http://127.0.0.1:1", 60*time.Second)
}

// storageClassWithSecret creates a Secret of data in the driver's
// namespace and a variant of the bucket-per-volume StorageClass that
// uses it (and endpoint, unless ""); both go when the test ends.
func (s *suite) storageClassWithSecret(suffix, endpoint string, data map[string]string) (scName, secretName string) {
	s.t.Helper()
	secretName = s.ns + "-" + suffix
	if _, err := s.kc.CoreV1().Secrets(driverNS).Create(s.ctx(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName}, StringData: data,
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { s.kc.CoreV1().Secrets(driverNS).Delete(s.ctx(), secretName, metav1.DeleteOptions{}) })
	return s.storageClassVariant(suffix, func(sc *storagev1.StorageClass) {
		if endpoint != "" {
			sc.Parameters["endpoint"] = endpoint
		}
		sc.Parameters["csi.storage.k8s.io/provisioner-secret-name"] = secretName
		sc.Parameters["csi.storage.k8s.io/controller-publish-secret-name"] = secretName
	}), secretName
}

// storageClassVariant creates a copy of the bucket-per-volume StorageClass
// changed by edit, deleted when the test ends, and returns its name.
func (s *suite) storageClassVariant(suffix string, edit func(*storagev1.StorageClass)) string {
	s.t.Helper()
	base, err := s.kc.StorageV1().StorageClasses().Get(s.ctx(), scBucket, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	sc := base.DeepCopy()
	sc.ObjectMeta = metav1.ObjectMeta{Name: s.ns + "-" + suffix}
	edit(sc)
	if _, err := s.kc.StorageV1().StorageClasses().Create(s.ctx(), sc, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { s.kc.StorageV1().StorageClasses().Delete(s.ctx(), sc.Name, metav1.DeleteOptions{}) })
	return sc.Name
}

// TestKubeletRestartKeepsStreaming: kubelet restarts (an upgrade, a
// crash) while a pod streams writes; the mount lives in the mounter pod,
// outside kubelet, so the stream goes on without an error and is complete.
// E2E_RESTART_KUBELET is the command that restarts a node's kubelet, given
// the node's name in $E2E_NODE (default: the local cluster's script; on
// kind, a docker exec).
func TestKubeletRestartKeepsStreaming(t *testing.T) {
	s := newSuite(t)
	s.streamThrough(func(node string) {
		restart := env("E2E_RESTART_KUBELET", `../local/node.sh restart-kubelet "$E2E_NODE"`)
		cmd := exec.Command("sh", "-c", restart)
		cmd.Env = append(os.Environ(), "E2E_NODE="+node)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("restart kubelet (%s): %v\n%s", restart, err, out)
		}
	})
}

// streamThrough runs disrupt, given the pod's node, while a pod appends 40
// lines to a file over 10 s, then checks the pod saw no error and all 40
// lines are in S3.
func (s *suite) streamThrough(disrupt func(node string)) {
	t := s.t
	t.Helper()
	s.pvc("stream", scBucket, corev1.ReadWriteMany)
	pv := s.boundPV("stream")
	bucket, prefix := volume(pv)
	s.pod("streamer", "stream", `set -e; i=0; while [ $i -lt 40 ]; do echo "line $i" >> /data/log.txt; i=$((i+1)); sleep 0.25; done; echo done`, podOpts{})
	s.waitPod("streamer", corev1.PodRunning, 3*time.Minute)
	p, err := s.kc.CoreV1().Pods(s.ns).Get(s.ctx(), "streamer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	disrupt(p.Spec.NodeName)
	if out := s.waitPod("streamer", corev1.PodSucceeded, 3*time.Minute); !strings.Contains(out, "done") {
		t.Fatalf("streamer: %q", out)
	}
	o, err := s.s3.GetObject(s.ctx(), bucket, prefix+"log.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	var buf bytes.Buffer
	buf.ReadFrom(o)
	if n := strings.Count(buf.String(), "\n"); n != 40 {
		t.Fatalf("log has %d lines, want 40", n)
	}
}

// TestDeletedMounterIsReplaced: the mounter pod itself is deleted (by
// hand, or evicted) while a pod uses the volume. The controller starts a
// new mounter pod for the attached volume, and the node mounts the volume
// again from it, in place: the reader sees the repaired mount.
func TestDeletedMounterIsReplaced(t *testing.T) {
	s := newSuite(t)
	pv := s.healingReader("replace")
	old := s.mounterPodOf(pv.Spec.CSI.VolumeHandle)
	// No grace period: the mount breaks at once, as when an eviction's
	// grace runs out while the pod still uses the volume.
	if err := s.kc.CoreV1().Pods(driverNS).Delete(s.ctx(), old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.eventually(2*time.Minute, "a new mounter pod", func() (bool, error) {
		p, err := s.kc.CoreV1().Pods(driverNS).Get(s.ctx(), old.Name, metav1.GetOptions{})
		return err == nil && p.UID != old.UID && p.DeletionTimestamp == nil, err
	})
	// The node mounts again from the new pod, and tells the reader so.
	s.eventFor(s.ns, "Pod", "reader", "re-mounted the volume", 2*time.Minute)
	t.Logf("the volume was mounted again %v after its mounter pod was deleted", time.Since(start).Round(time.Second))
	s.expectHealed(pv)
}
