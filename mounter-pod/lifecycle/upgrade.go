package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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
	Restarts    int32     // how often kubelet restarted the container
	LastExit    time.Time // when the container before this one ended; zero if none did
}

// kubeletMaxBackOff is the longest kubelet holds a container it restarts
// (its crash-loop back-off doubles from 10 s up to this).
const kubeletMaxBackOff = 5 * time.Minute

// HeldBackUntil is until when kubelet may hold a new container of this
// pod in its crash-loop back-off, zero when it would not. Kubelet holds a
// container start while less than its back-off (kept per image) has
// passed since the exit of the container before the running one (the
// one that hands over is still running when kubelet decides: LastExit);
// the back-off of an image grows with each restart (every hand-over is
// one), and ends within kubeletMaxBackOff. So a pod restarted twice or
// more is held for at most that long after LastExit; one restarted once
// or never is not held (its new image has no back-off yet; except after
// a start of that image that failed without a restart, as a pull error,
// which is rare and short).
func (c Container) HeldBackUntil() time.Time {
	if c.Restarts < 2 || c.LastExit.IsZero() {
		return time.Time{}
	}
	// A second more: the API gives the exit to the second.
	return c.LastExit.Add(kubeletMaxBackOff + time.Second)
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
		if cs.Name != spec.Container {
			continue
		}
		if cs.State.Running != nil {
			c.ContainerID, c.Ready = cs.ContainerID, cs.Ready
		}
		c.Restarts = cs.RestartCount
		if last := cs.LastTerminationState.Terminated; last != nil {
			c.LastExit = last.FinishedAt.Time
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
