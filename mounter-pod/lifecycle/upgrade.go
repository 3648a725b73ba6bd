package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// Container is what the node plugin reads of a mounter pod's container
// to upgrade it in place: the image its spec asks for, and the running
// container (its ID changes when kubelet starts the new image).
type Container struct {
	PodUID      string
	Image       string // the spec's
	ContainerID string // the running container's, "" while none runs
	Ready       bool
}

// Container reads m's live mounter pod's container; found is false when
// there is no such pod (or it is being deleted).
func (f Finder) Container(ctx context.Context, m spec.Mounter) (c Container, found bool, err error) {
	pod, err := f.pod(ctx, m)
	if err != nil || pod == nil {
		return c, false, err
	}
	if !alive(pod) || pod.Annotations[spec.AnnotationVolume] != m.VolumeID {
		return c, false, nil
	}
	c.PodUID = string(pod.UID)
	for _, ct := range pod.Spec.Containers {
		if ct.Name == spec.Container {
			c.Image = ct.Image
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == spec.Container && cs.State.Running != nil {
			c.ContainerID, c.Ready = cs.ContainerID, cs.Ready
		}
	}
	return c, true, nil
}

// SetImage changes the image of m's mounter pod (of UID uid: not one that
// replaced it meanwhile) in place; kubelet then stops the container and
// starts the new image in the same pod.
func (f Finder) SetImage(ctx context.Context, m spec.Mounter, uid, image string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid}, // a precondition: the API refuses another pod's
		"spec":     map[string]any{"containers": []map[string]string{{"name": spec.Container, "image": image}}},
	})
	if err != nil {
		return err
	}
	_, err = f.Client.CoreV1().Pods(m.NamespaceOr(f.Namespace)).Patch(ctx, m.PodName(), types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("set the image of mounter pod %s: %w", m.PodName(), err)
	}
	return nil
}
