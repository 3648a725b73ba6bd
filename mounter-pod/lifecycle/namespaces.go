package lifecycle

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

// Mounters run in the driver's namespace (Config.Namespace), or, for a
// volume whose StorageClass says mounterNamespace: pvc, in its PVC's
// namespace, so that the tenant's ResourceQuota and LimitRange count
// them. The admin lists those namespaces (Config.PVCNamespaces) and
// grants the driver rights there (the chart's mounter.pvcNamespaces):
// a volume asking for another is refused, never run where no one
// expects pods of the driver's.

// ErrNamespaceNotAllowed: the volume's mounters would run in a namespace
// the admin did not list.
var ErrNamespaceNotAllowed = errors.New("mounters may not run in this namespace")

// ErrNoOwnSecret: a volume whose mounters run outside the driver's
// namespace has no Secret of its own; the driver's own S3 keys
// (--s3-credentials-dir) never leave its namespace.
var ErrNoOwnSecret = errors.New("the volume has no Secret of its own")

// Namespaces are where mounters may run.
type Namespaces struct {
	Driver string   // the driver's own
	PVC    []string // PVCs' namespaces the admin listed
}

// Of is where m's pods run, if the admin allows it.
func (n Namespaces) Of(m spec.Mounter) (string, error) {
	ns := m.NamespaceOr(n.Driver)
	if ns == n.Driver || slices.Contains(n.PVC, ns) {
		return ns, nil
	}
	return "", fmt.Errorf("%w: volume %s runs its mounters in namespace %q (StorageClass %s: %s), which the driver's admin has not listed: add it to the chart's mounter.pvcNamespaces (objfuse-csi --pvc-namespaces), or use a StorageClass without it",
		ErrNamespaceNotAllowed, m.VolumeID, ns, volume.ParamMounterNamespace, volume.MounterNamespacePVC)
}

// All lists them, the driver's first.
func (n Namespaces) All() []string { return append([]string{n.Driver}, n.PVC...) }

func (k *Kube) allowed() Namespaces { return Namespaces{Driver: k.Namespace, PVC: k.PVCNamespaces} }

// namespaceOf is where m's pods run, if the admin allows it.
func (k *Kube) namespaceOf(m spec.Mounter) (string, error) { return k.allowed().Of(m) }

// namespaces are where mounter pods may be: the driver's first.
func (k *Kube) namespaces() []string { return k.allowed().All() }

// OwnSecretNeeded refuses the driver's own credentials (no publish
// Secret) for a mounter outside the driver's namespace.
func OwnSecretNeeded(m spec.Mounter, hasSecret bool) error {
	if ns := m.Volume.Mounter.Namespace; ns != "" && !hasSecret {
		return fmt.Errorf("%w: volume %s runs its mounters in namespace %q, and the driver's own S3 credentials never go outside the driver's namespace: give its StorageClass a controller-publish Secret (csi.storage.k8s.io/controller-publish-secret-name and -namespace) with keys for this volume's bucket only",
			ErrNoOwnSecret, m.VolumeID, ns)
	}
	return nil
}

// ParseNamespaces reads objfuse-csi's --pvc-namespaces: a comma-separated
// list of namespace names, none repeated, not the driver's own.
func ParseNamespaces(list, driverNamespace string) ([]string, error) {
	var out []string
	for _, ns := range strings.Split(list, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
		}
		if ns == driverNamespace {
			return nil, fmt.Errorf("namespace %q is the driver's own: mounters run there anyway", ns)
		}
		if slices.Contains(out, ns) {
			return nil, fmt.Errorf("namespace %q is listed twice", ns)
		}
		out = append(out, ns)
	}
	return out, nil
}

// forbiddenElsewhere says whether err is the API refusing the driver in
// a PVC namespace: its rights there were taken away (the namespace
// unlisted), so nothing of the driver's can be there to act on.
func (k *Kube) forbiddenElsewhere(ns string, err error) bool {
	return ns != k.Namespace && apierrors.IsForbidden(err)
}

// madeOutside checks, outside the driver's namespace (driverNamespace),
// where others may create pods, that a pod of m's name is one the
// driver made.
func madeOutside(driverNamespace string, pod *corev1.Pod, m spec.Mounter) error {
	if pod.Namespace == driverNamespace {
		return nil
	}
	return spec.Made(pod, m)
}

// volumeOf is the volume a PersistentVolume of the driver's names, as
// ControllerPublishVolume reads it from the same attributes.
func (k *Kube) volumeOf(src *corev1.CSIPersistentVolumeSource) (volume.Volume, error) {
	return volume.FromContext(src.VolumeHandle, src.VolumeAttributes, k.Volumes)
}
