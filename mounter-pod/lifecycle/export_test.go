package lifecycle

import (
	"context"
	corev1 "k8s.io/api/core/v1"
	"sync"
	"time"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// StartCache fills k's cluster cache, as Run does before its passes.
func StartCache(ctx context.Context, k *Kube) error { return k.startCache(ctx) }

// SyncCredentials runs one pass of the credentials sync.
func SyncCredentials(ctx context.Context, k *Kube) (int, error) { return k.syncCredentials(ctx) }

// RelaunchMissing runs one pass of the mounter check.
func RelaunchMissing(ctx context.Context, k *Kube) (int, error) { return k.relaunchMissing(ctx) }

// CollectOrphans runs one pass of the orphan collection.
func CollectOrphans(ctx context.Context, k *Kube) (int, error) { return k.collectOrphans(ctx) }

// DeleteOrphans deletes the mounter pods older than minAge that attached
// does not know.
func DeleteOrphans(ctx context.Context, k *Kube, minAge time.Duration, attached func(spec.Mounter) bool) (int, error) {
	return k.deleteOrphans(ctx, minAge, attached)
}

// Locked says whether m's lock is held.
func Locked(k *Kube, m spec.Mounter) bool {
	l, ok := k.locks.Load(m.Key())
	if !ok {
		return false
	}
	mu := l.(*sync.Mutex)
	if mu.TryLock() {
		mu.Unlock()
		return false
	}
	return true
}

// AttachmentName is the name Kubernetes gives a CSI volume's attachment.
func AttachmentName(handle, driver, node string) string { return attachmentName(handle, driver, node) }

// SyncInline runs the inline volumes' sync of one pod now, on the running
// watch (Run's), and waits for the stops it starts.
func SyncInline(ctx context.Context, k *Kube, namespace, name string) error {
	w := k.inline.Load()
	err := k.syncInline(ctx, w, namespace+"/"+name)
	w.stops.Wait()
	return err
}

// InlinePodPhase is the phase the inline watch's cache holds of a pod.
func InlinePodPhase(k *Kube, namespace, name string) corev1.PodPhase {
	p, err := k.inline.Load().pods[namespace].Get(name)
	if err != nil {
		return ""
	}
	return p.Status.Phase
}

// MounterPodSeen says whether k's pass of mounter pods (its cluster cache,
// once filled) holds the pod named name.
func MounterPodSeen(ctx context.Context, k *Kube, name string) bool {
	pods, err := k.mounterPods(ctx)
	if err != nil {
		return false
	}
	for _, p := range pods {
		if p.Name == name {
			return true
		}
	}
	return false
}

// AttachWatching says whether the watch of scheduled pods for their
// volumes' attachments runs.
func AttachWatching(k *Kube) bool { return k.attach.Load() != nil }

// SyncAttachment syncs the attachment of PersistentVolume pv on node now,
// on the running watch (Run's).
func SyncAttachment(ctx context.Context, k *Kube, pv, node string) error {
	return k.syncAttachment(ctx, k.attach.Load(), attachKey{pv: pv, node: node})
}
