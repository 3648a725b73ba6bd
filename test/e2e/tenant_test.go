//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// tenantNS is the namespace the local overlay lists for mounters in the
// PVC's namespace (deploy/kustomize/local/tenant.yaml), and tenantSC its
// StorageClass (mounterNamespace: pvc).
const (
	tenantNS = "objfuse-e2e-tenant"
	tenantSC = "objfuse-minio-tenant"
)

// A PVC of a StorageClass with mounterNamespace: pvc, in a namespace the
// admin listed, gets its mounter pod in that namespace (so its quota
// counts it) with the tenant's own Secret, and a pod writes through it; a
// tenant that deletes its mounter gets a new one and the mount back. A
// PVC in a namespace not listed is refused, with an Event on the PVC that
// says what to change.
func TestMountersInThePVCNamespace(t *testing.T) {
	s := newSuite(t)
	ctx := s.ctx()

	refused := s.pvc("not-listed", tenantSC, corev1.ReadWriteMany)
	s.eventFor(s.ns, "PersistentVolumeClaim", refused.Name, "mounter.pvcNamespaces", 2*time.Minute)

	// The listed namespace outlives the test: what is made there goes.
	tenant := *s
	tenant.ns = tenantNS
	t.Cleanup(func() {
		tenant.kc.CoreV1().Pods(tenantNS).Delete(ctx, "writer", metav1.DeleteOptions{})
		tenant.kc.CoreV1().Pods(tenantNS).Delete(ctx, "reader", metav1.DeleteOptions{})
		pvc, err := tenant.kc.CoreV1().PersistentVolumeClaims(tenantNS).Get(ctx, "tenant", metav1.GetOptions{})
		if err != nil {
			return
		}
		tenant.kc.CoreV1().PersistentVolumeClaims(tenantNS).Delete(ctx, "tenant", metav1.DeleteOptions{})
		if pvc.Spec.VolumeName != "" {
			tenant.eventually(3*time.Minute, "the tenant's PV deleted", func() (bool, error) {
				_, err := tenant.kc.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
		}
	})
	tenant.pvc("tenant", tenantSC, corev1.ReadWriteMany)
	pv := tenant.boundPV("tenant")
	// The writer stays, holding the volume attached and its mount (with
	// HostToContainer propagation, which sees a mount repaired: a new
	// mounter pod starts without its predecessor's state, so the node
	// mounts the volume again rather than hands the connection over).
	h2c := corev1.MountPropagationHostToContainer
	tenant.pod("writer", "tenant", "set -e; echo tenant > /data/who; sync; echo wrote $(cat /data/who); sleep 3600", podOpts{propagation: &h2c})
	if got := tenant.awaitLog("writer", "wrote "); got != "tenant" {
		t.Fatalf("writer read back %q", got)
	}
	bucket, prefix := volume(pv)
	if got := tenant.objectText(bucket, prefix+"who"); got != "tenant\n" {
		t.Errorf("s3 object %q", got)
	}

	mounters, err := s.kc.CoreV1().Pods(tenantNS).List(ctx, metav1.ListOptions{LabelSelector: spec.Selector})
	if err != nil {
		t.Fatal(err)
	}
	var mounter *corev1.Pod
	for i, p := range mounters.Items {
		if p.Annotations[spec.AnnotationVolume] == pv.Spec.CSI.VolumeHandle {
			mounter = &mounters.Items[i]
		}
	}
	if mounter == nil {
		t.Fatalf("no mounter pod of %s in %s", pv.Name, tenantNS)
	}
	m := spec.Mounter{VolumeID: pv.Spec.CSI.VolumeHandle, NodeID: mounter.Annotations[spec.AnnotationNode]}
	if err := spec.Made(mounter, m); err != nil {
		t.Errorf("the tenant's mounter pod: %v", err)
	}
	if _, err := s.kc.CoreV1().Pods(driverNS).Get(ctx, m.PodName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a mounter pod of the tenant's volume in %s too: %v", driverNS, err)
	}
	secret, err := s.kc.CoreV1().Secrets(tenantNS).Get(ctx, m.SecretName(), metav1.GetOptions{})
	if err != nil || len(secret.Data) == 0 {
		t.Fatalf("the mounter's Secret in %s: %v", tenantNS, err)
	}

	// The tenant stops its own mounter: the driver starts another in
	// the same namespace, the writer's mount works again, and a new pod
	// reads the file through it.
	if err := s.kc.CoreV1().Pods(tenantNS).Delete(ctx, mounter.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventually(2*time.Minute, "a new mounter pod in "+tenantNS, func() (bool, error) {
		p, err := s.kc.CoreV1().Pods(tenantNS).Get(ctx, m.PodName(), metav1.GetOptions{})
		return err == nil && p.UID != mounter.UID && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning, err
	})
	s.eventually(2*time.Minute, "the writer's mount back", func() (bool, error) {
		out, err := s.exec(tenantNS, "writer", "c", "cat", "/data/who")
		return err == nil && out == "tenant\n", fmt.Errorf("%q, %v", out, err)
	})
	tenant.pod("reader", "tenant", "cat /data/who", podOpts{})
	if out := tenant.waitPod("reader", corev1.PodSucceeded, 3*time.Minute); !strings.Contains(out, "tenant") {
		t.Fatalf("reader after the mounter was replaced: %s", out)
	}
}
