package spec

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// ErrNotMade: a pod of a mounter's name does not have the shape the
// driver gives mounter pods.
var ErrNotMade = errors.New("not a mounter pod the driver made")

// Made says whether pod has the shape Template.Pod gives m's mounter: its
// one container runs objfuse-mount unprivileged, with the socket and
// staging emptyDirs and m's credentials Secret, and no host namespace or
// path. Where others may create pods (a PVC's namespace, see
// volume.ParamMounterNamespace), a pod of the mounter's name is adopted,
// handed a FUSE connection or given credentials only if it is. The
// image is not checked: an upgrade changes it in place.
func Made(pod *corev1.Pod, m Mounter) error {
	s := pod.Spec
	switch {
	case pod.Annotations[AnnotationVolume] != m.VolumeID || pod.Annotations[AnnotationNode] != m.NodeID || pod.Labels[LabelKey] != m.Key():
		return fmt.Errorf("%w: it is labelled for another volume or node", ErrNotMade)
	case len(s.Containers) != 1 || len(s.InitContainers) != 0 || len(s.EphemeralContainers) != 0:
		return fmt.Errorf("%w: it has other containers", ErrNotMade)
	case s.HostPID || s.HostIPC:
		return fmt.Errorf("%w: it shares the host's processes", ErrNotMade)
	}
	c := s.Containers[0]
	if c.Name != Container || len(c.Command) != 1 || c.Command[0] != "/objfuse-mount" {
		return fmt.Errorf("%w: its container is not %s running /objfuse-mount", ErrNotMade, Container)
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		return fmt.Errorf("%w: its container may be privileged", ErrNotMade)
	}
	want := map[string]bool{socketVolume: true, credentialsVolume: true, stagingVolume: true}
	for _, v := range s.Volumes {
		ok := want[v.Name]
		delete(want, v.Name)
		switch {
		case !ok:
			return fmt.Errorf("%w: it has volume %q", ErrNotMade, v.Name)
		case v.Name == credentialsVolume && (v.Secret == nil || v.Secret.SecretName != m.SecretName()):
			return fmt.Errorf("%w: its credentials are not Secret %s", ErrNotMade, m.SecretName())
		case v.Name != credentialsVolume && v.EmptyDir == nil:
			return fmt.Errorf("%w: its volume %q is not an emptyDir", ErrNotMade, v.Name)
		}
	}
	if len(want) != 0 {
		return fmt.Errorf("%w: it lacks a mounter's volumes", ErrNotMade)
	}
	return nil
}
