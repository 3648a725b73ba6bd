package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// A PVC's mounter starts when a pod that uses it is scheduled, not when
// kubelet has reported the volume in use. With CSIDriver
// `attachRequired: true` kubelet verifies an attachment only once its own
// node status lists the volume in use, and it posts that status every
// nodeStatusUpdateFrequency (10 s by default): pods waited up to 10 s for
// a mounter that ran long before. So the CSIDriver says
// `attachRequired: false`, kubelet stages at once (NodeStageVolume waits
// for the mounter, node_stage.go), and the controller attaches itself:
// it watches scheduled pods, and for each (PersistentVolume, node) that a
// pod not yet finished needs, makes the VolumeAttachment Kubernetes'
// attach/detach controller would have made. csi-attacher then calls
// ControllerPublishVolume, as before, and everything keyed by
// attachments (the mounter pod's owner, relaunch, orphan collection,
// credentials sync) stays as it was. An attachment no pod on its node has
// needed for detachGrace is deleted: csi-attacher calls
// ControllerUnpublishVolume, whose mounter drains, and keeps serving
// until kubelet has unstaged the volume (it unpublishes a pod's volumes
// before the pod is gone from the API).
//
// Where the CSIDriver says attachRequired: true (a cluster not yet
// upgraded) or is missing, this watch makes and deletes nothing: the
// attach/detach controller does it.

// detachGrace is how long no pod on a node needs a volume before its
// attachment goes (Config.DetachGrace): a rollout that replaces a pod on
// the same node keeps its mounter, and the new pod needs no new one.
const detachGrace = 10 * time.Second

// attachWorkers sync attachments side by side.
const attachWorkers = 4

// attachResync is how often every attachment of the driver is looked at
// again, so that one whose last pod went while the controller was down
// is deleted too.
const attachResync = 30 * time.Second

// attachRetry is how soon an attachment still being deleted, which a pod
// needs again, is looked at again.
const attachRetry = 2 * time.Second

// multiAttachRetry is how soon a single-node volume that another node
// holds is looked at again (the other attachment's deletion also queues
// it at once).
const multiAttachRetry = 10 * time.Second

// attachKey is what one attachment serves: a PersistentVolume on a node.
type attachKey struct{ pv, node string }

// byNode and byClaim index the watched pods.
const (
	byNode  = "node"
	byClaim = "claim"
)

// attachWatch is the controller's watch of pods that use its
// PersistentVolumes.
type attachWatch struct {
	pods       cache.Indexer
	claims     corelisters.PersistentVolumeClaimLister
	csiDrivers storagelisters.CSIDriverLister
	queue      workqueue.TypedRateLimitingInterface[attachKey]
	// unneeded is since when no pod has needed each attachment the
	// watch saw needed by none.
	mu       sync.Mutex
	unneeded map[attachKey]time.Time
	grace    time.Duration
	// told is what was last told of each attachment, and when.
	told map[attachKey]told
	// pvLocks: PersistentVolume name → *sync.Mutex, held while deciding
	// whether a single-node volume may be attached to another node.
	pvLocks sync.Map
}

type told struct {
	msg string
	at  time.Time
}

// runAttach keeps the attachments of PVC volumes what the scheduled pods
// need until ctx ends. It needs the cluster cache (Run fills it first).
func (k *Kube) runAttach(ctx context.Context) {
	f := informers.NewSharedInformerFactoryWithOptions(k.Client, cacheResync, informers.WithTransform(slimPod))
	// Only scheduled pods: until then no node needs anything.
	podInf := informers.NewSharedInformerFactoryWithOptions(k.Client, cacheResync, informers.WithTransform(slimPod),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		})).Core().V1().Pods().Informer()
	if err := podInf.AddIndexers(cache.Indexers{byNode: podNode, byClaim: podClaims}); err != nil {
		k.Logger.Error("attachments: index pods", "err", err)
		return
	}
	w := &attachWatch{
		pods: podInf.GetIndexer(), claims: f.Core().V1().PersistentVolumeClaims().Lister(),
		csiDrivers: f.Storage().V1().CSIDrivers().Lister(),
		queue:      workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[attachKey]()),
		unneeded:   map[attachKey]time.Time{}, grace: k.DetachGrace, told: map[attachKey]told{},
	}
	defer w.queue.ShutDown()
	if err := k.watchForAttachments(w, podInf, f); err != nil {
		k.Logger.Error("attachments: watch", "err", err)
		return
	}
	f.Start(ctx.Done())
	go podInf.Run(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInf.HasSynced) {
		return
	}
	k.attach.Store(w)
	k.Logger.Info("watching scheduled pods for the attachments of their volumes")
	work(attachWorkers, w.queue, func(key attachKey) error { return k.syncAttachment(ctx, w, key) },
		func(key attachKey, err error) {
			k.Logger.Warn("attachment", "pv", key.pv, "node", key.node, "err", err)
		})
	k.enqueueAttachments(w)
	every(ctx, attachResync, func() { k.enqueueAttachments(w) })
}

// watchForAttachments queues the attachments that events of pods, claims
// and attachments may change.
func (k *Kube) watchForAttachments(w *attachWatch, pods cache.SharedIndexInformer, f informers.SharedInformerFactory) error {
	podEvent := func(obj any) {
		if pod := podOf(obj); pod != nil {
			for _, key := range k.attachKeysOf(w, pod) {
				w.queue.Add(key)
			}
		}
	}
	// A pod that went or finished may have taken its claims with it (a
	// namespace deleted): every attachment on its node is looked at.
	podGone := func(obj any) {
		if pod := podOf(obj); pod != nil && len(claimsOf(pod)) > 0 {
			podEvent(pod)
			k.enqueueAttachmentsOn(w, pod.Spec.NodeName)
		}
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: podEvent, DeleteFunc: podGone,
		UpdateFunc: func(old, obj any) {
			if was, pod := podOf(old), podOf(obj); was != nil && pod != nil && !finished(was) && finished(pod) {
				podGone(pod)
				return
			}
			podEvent(obj)
		},
	}); err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	// A claim bound after its pod was scheduled (WaitForFirstConsumer
	// binds it just before).
	if _, err := f.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { k.claimChanged(w, obj) }, UpdateFunc: func(_, obj any) { k.claimChanged(w, obj) },
	}); err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	// Attachments that change: one deleted while a pod needs it again is
	// made anew, and one that failed is told to its pods.
	_, err := k.cache.Load().cluster.Storage().V1().VolumeAttachments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { k.attachmentChanged(w, obj) }, UpdateFunc: func(_, obj any) { k.attachmentChanged(w, obj) },
		DeleteFunc: func(obj any) { k.attachmentGone(w, obj) },
	})
	if err != nil {
		return fmt.Errorf("attachments: %w", err)
	}
	return nil
}

// enqueueAttachments queues every attachment of the driver.
func (k *Kube) enqueueAttachments(w *attachWatch) {
	vas, err := k.cache.Load().vas.List(labels.Everything())
	if err != nil {
		k.Logger.Warn("attachments: list cached attachments", "err", err)
		return
	}
	for _, va := range vas {
		k.attachmentChanged(w, va)
	}
}

// enqueueAttachmentsOn queues every attachment of the driver on node.
func (k *Kube) enqueueAttachmentsOn(w *attachWatch, node string) {
	vas, err := k.cache.Load().vas.List(labels.Everything())
	if err != nil {
		return
	}
	for _, va := range vas {
		if va.Spec.NodeName == node {
			k.attachmentChanged(w, va)
		}
	}
}

// attachmentChanged queues the key of an attachment of the driver.
func (k *Kube) attachmentChanged(w *attachWatch, obj any) {
	if va := attachmentOf(obj); va != nil && va.Spec.Attacher == k.Driver && va.Spec.Source.PersistentVolumeName != nil {
		w.queue.Add(attachKey{pv: *va.Spec.Source.PersistentVolumeName, node: va.Spec.NodeName})
	}
}

// attachmentGone queues, beside the key of an attachment that went, those
// of the pods on other nodes that use its volume: a single-node volume
// may be attached to one of them now.
func (k *Kube) attachmentGone(w *attachWatch, obj any) {
	k.attachmentChanged(w, obj)
	va := attachmentOf(obj)
	if va == nil || va.Spec.Source.PersistentVolumeName == nil {
		return
	}
	pv, err := k.cache.Load().pvs.Get(*va.Spec.Source.PersistentVolumeName)
	if err != nil || pv.Spec.ClaimRef == nil {
		return
	}
	pods, err := w.pods.ByIndex(byClaim, pv.Spec.ClaimRef.Namespace+"/"+pv.Spec.ClaimRef.Name)
	if err != nil {
		return
	}
	for _, p := range pods {
		w.queue.Add(attachKey{pv: pv.Name, node: p.(*corev1.Pod).Spec.NodeName})
	}
}

// attachmentOf is the attachment of an informer's event, tombstones
// included.
func attachmentOf(obj any) *storagev1.VolumeAttachment {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	va, _ := obj.(*storagev1.VolumeAttachment)
	return va
}

// claimChanged queues the attachments of the pods that use a claim.
func (k *Kube) claimChanged(w *attachWatch, obj any) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || pvc.Spec.VolumeName == "" {
		return
	}
	pods, err := w.pods.ByIndex(byClaim, pvc.Namespace+"/"+pvc.Name)
	if err != nil {
		return
	}
	for _, p := range pods {
		w.queue.Add(attachKey{pv: pvc.Spec.VolumeName, node: p.(*corev1.Pod).Spec.NodeName})
	}
}

// selfAttach says whether the CSIDriver leaves attaching to the driver.
func (k *Kube) selfAttach(w *attachWatch) bool {
	d, err := w.csiDrivers.Get(k.Driver)
	if err != nil {
		return false
	}
	return d.Spec.AttachRequired != nil && !*d.Spec.AttachRequired
}

// syncAttachment makes key's attachment exist while a pod on its node
// needs the volume, and deletes it once none has for detachGrace.
func (k *Kube) syncAttachment(ctx context.Context, w *attachWatch, key attachKey) error {
	if !k.selfAttach(w) {
		return nil
	}
	pv, err := k.cache.Load().pvs.Get(key.pv)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("cached PersistentVolume %s: %w", key.pv, err)
	}
	if pv != nil && (pv.Spec.CSI == nil || pv.Spec.CSI.Driver != k.Driver) {
		return nil
	}
	var users []*corev1.Pod
	if pv != nil {
		users = k.usersOn(w, key)
	}
	name := ""
	if pv != nil {
		name = attachmentName(pv.Spec.CSI.VolumeHandle, k.Driver, key.node)
	}
	if len(users) > 0 {
		w.forgetUnneeded(key)
		return k.attachFor(ctx, w, pv, name, key, users)
	}
	va, ok := k.cachedAttachment(key, name)
	if !ok {
		w.forget(key)
		return nil
	}
	if va.DeletionTimestamp != nil {
		w.forgetUnneeded(key)
		return nil
	}
	if wait := w.unneededFor(key); wait > 0 {
		w.queue.AddAfter(key, wait)
		return nil
	}
	// The watch may lag behind a pod just scheduled there, whose stage
	// may have found the mounter by name already: the API decides.
	user, err := k.userOn(ctx, key.pv, key.node)
	if err != nil {
		return err
	}
	if user != "" {
		w.forgetUnneeded(key) // its pod's event comes, and queues key again
		return nil
	}
	err = k.Client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &va.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete attachment %s: %w", va.Name, err) // retried, past the grace still
	}
	w.forgetUnneeded(key)
	if err != nil {
		return nil // gone, or made again meanwhile
	}
	k.metrics.detaches.Inc()
	k.Logger.Info("detaching: no pod on the node uses the volume", "pv", key.pv, "node", key.node, "attachment", va.Name)
	return nil
}

// attachFor makes the attachment name of key, which users need, or tells
// them why the one there does not serve.
func (k *Kube) attachFor(ctx context.Context, w *attachWatch, pv *corev1.PersistentVolume, name string, key attachKey, users []*corev1.Pod) error {
	va, err := k.cache.Load().vas.Get(name)
	if apierrors.IsNotFound(err) {
		if singleNode(pv) {
			// As Kubernetes' attach/detach controller: a volume no
			// access mode lets more than one node use stays on one.
			unlock := w.lockVolume(key.pv)
			defer unlock()
			other, err := k.attachedElsewhere(ctx, key)
			if err != nil {
				return err
			}
			if other != "" {
				w.tell(k, key, users, fmt.Sprintf("Multi-Attach error for volume %s: its access modes %v allow one node, "+
					"and it is attached to node %s; it is attached here once it leaves that node", key.pv, pv.Spec.AccessModes, other))
				w.queue.AddAfter(key, multiAttachRetry) // and at once when that attachment goes
				return nil
			}
		}
		want := &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: k.Driver, NodeName: key.node,
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &key.pv}},
		}
		_, err = k.Client.StorageV1().VolumeAttachments().Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // the cache lags; the attachment's own event comes
		}
		if err != nil {
			return fmt.Errorf("create attachment %s: %w", name, err)
		}
		k.metrics.attaches.Inc()
		k.Logger.Info("attaching: a pod on the node uses the volume", "pv", key.pv, "node", key.node, "pod", users[0].Namespace+"/"+users[0].Name, "attachment", name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("cached attachment %s: %w", name, err)
	}
	if va.DeletionTimestamp != nil {
		// Detaching still (its mounter draining): made again once gone
		// (its deletion's event queues key again; this is the backstop).
		w.queue.AddAfter(key, attachRetry)
		return nil
	}
	if e := va.Status.AttachError; e != nil && !va.Status.Attached {
		w.tell(k, key, users, fmt.Sprintf("objfuse volume %s: its mounter on node %s did not start: %s", key.pv, key.node, e.Message))
	}
	return nil
}

// singleNode says whether pv's access modes let only one node use it.
func singleNode(pv *corev1.PersistentVolume) bool {
	for _, m := range pv.Spec.AccessModes {
		if m == corev1.ReadWriteMany || m == corev1.ReadOnlyMany {
			return false
		}
	}
	return true
}

// attachedElsewhere names a node other than key's that key's volume is
// attached to, or "". The cache answers where it knows one; where it
// knows none the API is asked, as the cache may not hold an attachment
// just made for another node.
func (k *Kube) attachedElsewhere(ctx context.Context, key attachKey) (string, error) {
	cached, err := k.cache.Load().vas.List(labels.Everything())
	if err != nil {
		return "", fmt.Errorf("list cached attachments: %w", err)
	}
	if other := k.otherNode(cached, key); other != "" {
		return other, nil
	}
	list, err := k.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list attachments: %w", err)
	}
	fresh := make([]*storagev1.VolumeAttachment, len(list.Items))
	for i := range list.Items {
		fresh[i] = &list.Items[i]
	}
	return k.otherNode(fresh, key), nil
}

// otherNode is the node of an attachment among vas of key's volume on
// another node than key's, or "".
func (k *Kube) otherNode(vas []*storagev1.VolumeAttachment, key attachKey) string {
	for _, va := range vas {
		if src := va.Spec.Source.PersistentVolumeName; va.Spec.Attacher == k.Driver && src != nil && *src == key.pv && va.Spec.NodeName != key.node {
			return va.Spec.NodeName
		}
	}
	return ""
}

// lockVolume holds pv's lock, under which one node at a time is decided
// for a single-node volume.
func (w *attachWatch) lockVolume(pv string) (unlock func()) {
	l, _ := w.pvLocks.LoadOrStore(pv, &sync.Mutex{})
	mu := l.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// toldAgain is how soon the same news of an attachment is told again.
const toldAgain = time.Minute

// tell records msg as a FailedAttachVolume Event on the pods users, where
// it is news: not told of key within toldAgain (the watch looks at an
// attachment on every change of its pods and every attachResync).
func (w *attachWatch) tell(k *Kube, key attachKey, users []*corev1.Pod, msg string) {
	w.mu.Lock()
	last, ok := w.told[key]
	if ok && last.msg == msg && time.Since(last.at) < toldAgain {
		w.mu.Unlock()
		return
	}
	w.told[key] = told{msg: msg, at: time.Now()}
	w.mu.Unlock()
	for _, p := range users {
		k.Events.Event(p, corev1.EventTypeWarning, "FailedAttachVolume", msg)
	}
}

// cachedAttachment is key's attachment in the cache, by name or, for a
// PersistentVolume that is gone, by what it attaches.
func (k *Kube) cachedAttachment(key attachKey, name string) (*storagev1.VolumeAttachment, bool) {
	if name != "" {
		va, err := k.cache.Load().vas.Get(name)
		return va, err == nil
	}
	vas, err := k.cache.Load().vas.List(labels.Everything())
	if err != nil {
		return nil, false
	}
	for _, va := range vas {
		if pv := va.Spec.Source.PersistentVolumeName; va.Spec.Attacher == k.Driver && pv != nil && *pv == key.pv && va.Spec.NodeName == key.node {
			return va, true
		}
	}
	return nil, false
}

// usersOn are the pods on key's node, not finished, that use key's
// PersistentVolume through a claim.
func (k *Kube) usersOn(w *attachWatch, key attachKey) []*corev1.Pod {
	objs, err := w.pods.ByIndex(byNode, key.node)
	if err != nil {
		return nil
	}
	var out []*corev1.Pod
	for _, o := range objs {
		pod := o.(*corev1.Pod)
		if finished(pod) {
			continue
		}
		for _, claim := range claimsOf(pod) {
			if pvc, err := w.claims.PersistentVolumeClaims(pod.Namespace).Get(claim); err == nil && pvc.Spec.VolumeName == key.pv {
				out = append(out, pod)
				break
			}
		}
	}
	return out
}

// attachKeysOf are the attachments pod's volumes need (or needed) on its
// node, as far as its claims are bound.
func (k *Kube) attachKeysOf(w *attachWatch, pod *corev1.Pod) []attachKey {
	var out []attachKey
	for _, claim := range claimsOf(pod) {
		pvc, err := w.claims.PersistentVolumeClaims(pod.Namespace).Get(claim)
		if err == nil && pvc.Spec.VolumeName != "" && pod.Spec.NodeName != "" {
			out = append(out, attachKey{pv: pvc.Spec.VolumeName, node: pod.Spec.NodeName})
		}
	}
	return out
}

// unneededFor notes that no pod needs key now and returns how much of
// detachGrace is left.
func (w *attachWatch) unneededFor(key attachKey) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	since, ok := w.unneeded[key]
	if !ok {
		since = time.Now()
		w.unneeded[key] = since
	}
	return w.grace - time.Since(since)
}

func (w *attachWatch) forgetUnneeded(key attachKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.unneeded, key)
}

// forget drops what the watch keeps of key, once its attachment is gone.
func (w *attachWatch) forget(key attachKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.unneeded, key)
	delete(w.told, key)
}

// claimsOf names the claims pod's volumes use: its PVCs, and those of
// its generic ephemeral volumes (named <pod>-<volume>).
func claimsOf(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			out = append(out, pod.Name+"-"+v.Name)
		}
	}
	return out
}

func podNode(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}

func podClaims(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, c := range claimsOf(pod) {
		out = append(out, pod.Namespace+"/"+c)
	}
	return out, nil
}

// podOf is the pod of an informer's event, tombstones included.
func podOf(obj any) *corev1.Pod {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, _ := obj.(*corev1.Pod)
	return pod
}

// slimPod keeps of a watched pod what the attachments need (name, node,
// volumes, phase), so that the watch of every scheduled pod of the
// cluster costs little memory. Other objects pass as they are.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, DeletionTimestamp: pod.DeletionTimestamp},
		Spec:   corev1.PodSpec{NodeName: pod.Spec.NodeName, Volumes: pod.Spec.Volumes},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}, nil
}
