//go:build e2e

// Package e2e runs objfuse end to end against any cluster in $KUBECONFIG
// that has objfuse, MinIO and the StorageClasses of deploy/ installed: the
// local one-node cluster of test/local, or kind. Data is checked through
// the S3 API with checksums.
//
//	go test -tags e2e ./test/e2e
package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
)

// env reads the suite's settings, with the local cluster's defaults.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var (
	driverNS     = env("E2E_DRIVER_NAMESPACE", "objfuse-system")
	testImage    = env("E2E_TEST_IMAGE", "objfuse-test:v0.1.0-dev")
	scBucket     = env("E2E_SC_BUCKET_PER_VOLUME", "objfuse-minio")
	scShared     = env("E2E_SC_SHARED", "objfuse-minio-shared")
	sharedBucket = env("E2E_SHARED_BUCKET", "shared")
	s3Endpoint   = env("E2E_S3_ENDPOINT", "http://127.0.0.1:9000")
	s3AccessKey  = env("E2E_S3_ACCESS_KEY", "minioadmin")
	s3SecretKey  = env("E2E_S3_SECRET_KEY", "minioadmin")
	// hostAddr is where a server a test starts on its own host listens, as
	// the nodes and pods reach it: the host's address on the nodes' network
	// in the local cluster, the Docker network's gateway on kind.
	hostAddr = env("E2E_HOST_ADDR", "127.0.0.1")
)

type suite struct {
	t   *testing.T
	cfg *rest.Config
	kc  kubernetes.Interface
	s3  *minio.Client
	ns  string
	// diagnosed: the failure's diagnosis is logged already.
	diagnosed bool
}

var passed, failed atomic.Int32

// newSuite connects to the cluster and MinIO and makes a namespace for
// one test, deleted (with everything in it) when the test ends.
func newSuite(t *testing.T) *suite {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			failed.Add(1)
		} else {
			passed.Add(1)
		}
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatalf("KUBECONFIG: %v", err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	creds := t.TempDir()
	os.WriteFile(creds+"/"+s3store.AccessKeyFile, []byte(s3AccessKey), 0o600)
	os.WriteFile(creds+"/"+s3store.SecretKeyFile, []byte(s3SecretKey), 0o600)
	s3, err := s3store.NewClient(s3store.Config{Endpoint: s3Endpoint, Region: "us-east-1", PathStyle: true, CredentialsDir: creds})
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{t: t, cfg: cfg, kc: kc, s3: s3}
	ns, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.ns = ns.Name
	t.Cleanup(func() {
		// Late (the test's own clean-ups ran first), for failures that
		// were not diagnosed where they happened.
		if t.Failed() && !s.diagnosed {
			s.diagnose()
		}
		s.deleteNamespace()
	})
	return s
}

func (s *suite) ctx() context.Context { return context.Background() }

// deleteNamespace removes the test's objects and waits until its PVs are
// gone, so a test leaves no buckets, mounter pods or mounts behind.
func (s *suite) deleteNamespace() {
	ctx := s.ctx()
	pvcs, _ := s.kc.CoreV1().PersistentVolumeClaims(s.ns).List(ctx, metav1.ListOptions{})
	s.kc.CoreV1().Namespaces().Delete(ctx, s.ns, metav1.DeleteOptions{})
	for _, pvc := range pvcs.Items {
		if pvc.Spec.VolumeName == "" {
			continue
		}
		s.eventually(3*time.Minute, "PV "+pvc.Spec.VolumeName+" deleted", func() (bool, error) {
			_, err := s.kc.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}
}

// eventually polls cond until it is true, failing the test at the deadline.
func (s *suite) eventually(d time.Duration, what string, cond func() (bool, error)) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			s.t.Errorf("timed out after %v waiting for %s (last error: %v)", d, what, lastErr)
			s.diagnose()
			s.t.FailNow()
		}
		<-time.After(500 * time.Millisecond)
	}
}

func (s *suite) pvc(name, sc string, mode corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	s.t.Helper()
	return s.pvcOfSize(name, sc, mode, "1Gi")
}

func (s *suite) pvcOfSize(name, sc string, mode corev1.PersistentVolumeAccessMode, size string) *corev1.PersistentVolumeClaim {
	s.t.Helper()
	pvc, err := s.kc.CoreV1().PersistentVolumeClaims(s.ns).Create(s.ctx(), s.pvcSpec(name, sc, mode, size), metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return pvc
}

// pvcSpec is a PVC of class sc, access mode and size, not created yet.
func (s *suite) pvcSpec(name, sc string, mode corev1.PersistentVolumeAccessMode, size string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{mode},
			StorageClassName: &sc,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse(size),
			}},
		},
	}
}

func (s *suite) boundPV(pvcName string) *corev1.PersistentVolume {
	s.t.Helper()
	var pvName string
	s.eventually(2*time.Minute, "PVC "+pvcName+" bound", func() (bool, error) {
		pvc, err := s.kc.CoreV1().PersistentVolumeClaims(s.ns).Get(s.ctx(), pvcName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pvName = pvc.Spec.VolumeName
		return pvc.Status.Phase == corev1.ClaimBound, fmt.Errorf("phase %s", pvc.Status.Phase)
	})
	pv, err := s.kc.CoreV1().PersistentVolumes().Get(s.ctx(), pvName, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return pv
}

type podOpts struct {
	readOnly    bool
	runAsUser   *int64
	fsGroup     *int64
	propagation *corev1.MountPropagationMode
	// nodeSelector places the pod (see onNode).
	nodeSelector map[string]string
}

// pod runs script in the test image with the PVC mounted at /data.
func (s *suite) pod(name, pvcName, script string, o podOpts) *corev1.Pod {
	s.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  o.nodeSelector,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: o.runAsUser,
				FSGroup:   o.fsGroup,
			},
			Containers: []corev1.Container{{
				Name:            "c",
				Image:           testImage,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"/bin/sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{
					Name: "data", MountPath: "/data", ReadOnly: o.readOnly, MountPropagation: o.propagation,
				}},
			}},
			Volumes: []corev1.Volume{{
				Name: "data",
				VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
					ClaimName: pvcName, ReadOnly: o.readOnly,
				}},
			}},
		},
	}
	p, err := s.kc.CoreV1().Pods(s.ns).Create(s.ctx(), p, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

// waitPod waits for the pod to reach phase and returns its log.
func (s *suite) waitPod(name string, phase corev1.PodPhase, d time.Duration) string {
	s.t.Helper()
	s.eventually(d, "pod "+name+" "+string(phase), func() (bool, error) {
		p, err := s.kc.CoreV1().Pods(s.ns).Get(s.ctx(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed && phase != corev1.PodFailed {
			s.t.Fatalf("pod %s failed: %s\n%s", name, p.Status.Message, s.logs(name))
		}
		return p.Status.Phase == phase, fmt.Errorf("phase %s", p.Status.Phase)
	})
	return s.logs(name)
}

func (s *suite) logs(name string) string {
	rc, err := s.kc.CoreV1().Pods(s.ns).GetLogs(name, &corev1.PodLogOptions{}).Stream(s.ctx())
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

// objectText reads an object through the S3 API.
func (s *suite) objectText(bucket, key string) string {
	s.t.Helper()
	o, err := s.s3.GetObject(s.ctx(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		s.t.Fatalf("read s3://%s/%s: %v", bucket, key, err)
	}
	return string(b)
}

// objectSum reads an object through the S3 API and returns its SHA-256.
func (s *suite) objectSum(bucket, key string) string {
	s.t.Helper()
	o, err := s.s3.GetObject(s.ctx(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	defer o.Close()
	h := sha256.New()
	if _, err := io.Copy(h, o); err != nil {
		s.t.Fatalf("read s3://%s/%s: %v", bucket, key, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// volume returns the bucket and prefix a PV's volume handle names.
func volume(pv *corev1.PersistentVolume) (bucket, prefix string) {
	a := pv.Spec.CSI.VolumeAttributes
	return a["bucket"], a["prefix"]
}

// eventFor waits for an Event on the object whose message contains want.
func (s *suite) eventFor(ns, kind, name, want string, d time.Duration) {
	s.t.Helper()
	s.eventually(d, fmt.Sprintf("an event on %s %s mentioning %q", kind, name, want), func() (bool, error) {
		evs, err := s.kc.CoreV1().Events(ns).List(s.ctx(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name,
		})
		if err != nil {
			return false, err
		}
		var msgs []string
		for _, e := range evs.Items {
			if strings.Contains(e.Message, want) {
				return true, nil
			}
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
		return false, fmt.Errorf("events: %v", msgs)
	})
}

// exec runs a command in a pod's container, as kubectl exec does.
func (s *suite) exec(ns, pod, container string, cmd ...string) (string, error) {
	req := s.kc.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(s.cfg, "POST", req.URL())
	if err != nil {
		return "", err
	}
	var out strings.Builder
	err = ex.StreamWithContext(s.ctx(), remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
	return out.String(), err
}

func TestMain(m *testing.M) {
	code := m.Run()
	fmt.Printf("e2e: %d passed, %d failed\n", passed.Load(), failed.Load())
	os.Exit(code)
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }
