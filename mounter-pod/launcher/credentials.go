package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// RefreshCredentials brings each live mounter's credentials Secret up to
// what current(volumeID) says it should hold, and returns how many it
// changed. A Secret copied at publish goes stale when its source is
// rotated (new keys, a renewed session token); kubelet carries the new
// copy into the running mounter's files, which it re-reads, so the
// mount keeps working without a restart. Volumes current does not know
// (ok false) are left alone.
func (k *Kube) RefreshCredentials(ctx context.Context, current func(volumeID string) (creds map[string][]byte, ok bool)) (int, error) {
	pods, err := k.mounterPods(ctx)
	if err != nil {
		return 0, err
	}
	secrets := k.Client.CoreV1().Secrets(k.Namespace)
	n := 0
	var errs []error // one Secret that fails must not hold up the others
	for _, pod := range pods {
		m := spec.Mounter{VolumeID: pod.Annotations[spec.AnnotationVolume], NodeID: pod.Annotations[spec.AnnotationNode]}
		if m.VolumeID == "" || pod.DeletionTimestamp != nil {
			continue
		}
		want, ok := current(m.VolumeID)
		if !ok {
			continue
		}
		have, err := k.mounterSecret(ctx, m.SecretName())
		if apierrors.IsNotFound(err) {
			continue // being created or torn down by a publish call
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("get mounter secret %s: %w", m.SecretName(), err))
			continue
		}
		if sameData(have.Data, want) {
			continue
		}
		have.Data = want
		_, err = secrets.Update(ctx, have, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue // a publish or unpublish got there first; next pass
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("update mounter secret %s: %w", have.Name, err))
			continue
		}
		k.Logger.Info("updated mounter credentials", "secret", have.Name, "volume", m.VolumeID, "node", m.NodeID)
		n++
	}
	return n, errors.Join(errs...)
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}
