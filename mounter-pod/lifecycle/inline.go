package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
	"github.com/objfuse/objfuse/volume/inline"
)

// An inline volume (a pod's own `csi:` volume of this driver, CSI's
// ephemeral lifecycle) has no ControllerPublishVolume: Kubernetes calls
// only NodePublishVolume. Its mounter still runs as an unprivileged pod
// the controller makes, one per (volume, node) as for a PVC: the
// controller watches the pods of the namespaces the allow-list names
// (inline.Rules), and for each scheduled pod that declares an allowed
// inline volume, launches its mounter on the pod's node with the
// credentials of the Secret the pod names (nodePublishSecretRef, in its
// own namespace). What the pod declares is read from the API server, not
// from the node, and the node plugin gets no right to make pods: a node
// cannot start mounters of its own choosing. An inline volume's mounter
// exits once kubelet has unpublished the volume (the node releases it,
// and it runs with --exit-when-released): kubelet does that after the
// pod's containers ended, even after it wrote the pod's final phase. The
// controller deletes a mounter that exited, or whose pod is gone; a pod
// still terminating that lost its mounter (a drain evicts both) gets a
// new one, so that kubelet's unpublish can still upload what it holds.

// inlineResync is how often every watched pod is looked at again: a
// mounter deleted while its pod runs is started again within this, and
// rotated credentials reach it.
const inlineResync = 30 * time.Second

// inlineWorkers launch mounters side by side: one waits for its pod to
// run (up to ReadyTimeout) without holding up the others.
const inlineWorkers = 4

// inlineCredentialsEvery is how often a running inline mounter's
// credentials are compared with its pod's Secret (one GET each).
const inlineCredentialsEvery = 2 * time.Minute

// inlineWatch is the controller's watch of pods that may declare inline
// volumes.
type inlineWatch struct {
	// namespaces are those watched: the allow-list's where the driver
	// may list pods.
	namespaces []string
	pods       map[string]corelisters.PodNamespaceLister // by namespace
	queue      workqueue.TypedRateLimitingInterface[string]
	// refreshed is when each running mounter's credentials were last
	// compared with its pod's Secret, by spec.Mounter.Key.
	refreshed sync.Map
	// stopping are the mounters being stopped, by spec.Mounter.Key: a
	// stop waits for the mounter to drain, off the workers.
	stopping sync.Map
	// stops are the stops running (tests wait for them).
	stops sync.WaitGroup
}

// runInline launches and stops the mounters of inline volumes until ctx
// ends. It reads the allow-list again every inlineResync, and watches
// the pods of the namespaces it names then (an admin adding one needs no
// restart; the RBAC to watch it comes with the same chart change).
func (k *Kube) runInline(ctx context.Context) {
	var watching []string
	stop := func() {}
	lastErr := ""
	for {
		rules, err := inline.Load(k.InlineAllowFile)
		switch {
		case err != nil:
			if err.Error() != lastErr {
				k.Logger.Error("the allow-list of inline volumes is unreadable: kept as it was", "err", err)
			}
			lastErr = err.Error()
		case !slices.Equal(rules.Namespaces(), watching) || k.inlineMissing(watching):
			lastErr = ""
			stop()
			k.inline.Store(nil)
			ns := rules.Namespaces()
			watching = ns
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			stop = func() { cancel(); <-done }
			go func() { defer close(done); k.watchInline(wctx, ns) }()
		default:
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case <-time.After(inlineResync):
		}
	}
}

// inlineMissing says whether the running watch left out a namespace of
// want, where it could not list pods when it started (an API timeout, the
// Role not there yet): the next tick starts it again.
func (k *Kube) inlineMissing(want []string) bool {
	w := k.inline.Load()
	return w != nil && !slices.Equal(w.namespaces, want)
}

// watchInline keeps the mounters of the inline volumes of pods in
// namespaces right until ctx ends.
func (k *Kube) watchInline(ctx context.Context, namespaces []string) {
	if len(namespaces) == 0 {
		return
	}
	w := &inlineWatch{namespaces: []string{}, pods: map[string]corelisters.PodNamespaceLister{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
	defer w.queue.ShutDown()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			w.queue.Add(key)
		}
	}
	var factories []informers.SharedInformerFactory
	for _, ns := range namespaces {
		// A namespace where the driver may not watch pods would keep
		// the others waiting for a cache that never fills.
		if _, err := k.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			k.Logger.Error("inline volumes of a namespace the allow-list names are not served: the driver may not watch its pods (the chart's Role objfuse-inline there)", "namespace", ns, "err", err)
			continue
		}
		f := informers.NewSharedInformerFactoryWithOptions(k.Client, inlineResync, informers.WithNamespace(ns))
		inf := f.Core().V1().Pods()
		if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
		}); err != nil {
			k.Logger.Error("watch pods for inline volumes", "namespace", ns, "err", err)
			return
		}
		w.pods[ns] = inf.Lister().Pods(ns)
		w.namespaces = append(w.namespaces, ns)
		factories = append(factories, f)
	}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	for _, f := range factories {
		f.WaitForCacheSync(ctx.Done())
	}
	k.inline.Store(w)
	k.Logger.Info("watching pods for inline volumes", "namespaces", namespaces)
	work(inlineWorkers, w.queue, func(key string) error { return k.syncInline(ctx, w, key) },
		func(key string, err error) { k.Logger.Warn("inline volume", "pod", key, "err", err) })
	<-ctx.Done()
}

// syncInline makes the mounters of the pod named key what it needs: one
// per inline volume of this driver from when it is scheduled until kubelet
// has unpublished the volume (its mounter exited), none after.
func (k *Kube) syncInline(ctx context.Context, w *inlineWatch, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := w.pods[ns].Get(name)
	if apierrors.IsNotFound(err) {
		// Gone: kubelet removes a pod only once its volumes are
		// unpublished, so anything left is stopped (a mounter still
		// serving, after a forced delete, drains on SIGTERM).
		return k.stopInline(ctx, w, ns+"/"+name+"/", false)
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName == "" {
		return nil
	}
	// Done with its mounters: those that exited (released) go now.
	if finished(pod) {
		if err := k.stopInline(ctx, w, forPod(pod), true); err != nil {
			return err
		}
	}
	var errs []error
	for _, v := range pod.Spec.Volumes {
		if v.CSI == nil || v.CSI.Driver != k.Driver {
			continue
		}
		err := k.ensureInline(ctx, w, pod, v)
		if err == nil {
			continue
		}
		k.Events.Eventf(pod, corev1.EventTypeWarning, "InlineVolumeNotMounted", "objfuse volume %q: %v", v.Name, err)
		if userMistake(err) {
			// No retry mends it until the pod, its Secret or the
			// allow-list changes, and each resync looks again.
			k.Logger.Info("inline volume refused", "pod", forPod(pod), "volume", v.Name, "err", err)
			continue
		}
		errs = append(errs, fmt.Errorf("volume %s: %w", v.Name, err))
	}
	return errors.Join(errs...)
}

// userMistake says whether an inline volume fails for what its pod's
// author or the admin must change: an attribute, the allow-list, the
// Secret.
func userMistake(err error) bool {
	var pe *volume.ParseError
	return errors.As(err, &pe) || errors.Is(err, inline.ErrNotAllowed) || errors.Is(err, ErrNoCredentials) || errors.Is(err, ErrInlineLimit) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
}

// finished says whether a pod's containers have all ended for good.
func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// forPod is the spec.Mounter.ForPod of the inline volumes of pod.
func forPod(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name + "/" + string(pod.UID) }

// ensureInline launches the mounter of pod's inline volume v where the
// pod needs one, or keeps a running one's credentials current with the
// pod's Secret. A pod needs its mounter until kubelet unpublished the
// volume: the mounter then exits (Succeeded), and a finished pod has none
// to start again.
func (k *Kube) ensureInline(ctx context.Context, w *inlineWatch, pod *corev1.Pod, v corev1.Volume) error {
	handle := inline.Handle(string(pod.UID), v.Name)
	m := spec.Mounter{VolumeID: handle, NodeID: pod.Spec.NodeName,
		ReadOnly: v.CSI.ReadOnly != nil && *v.CSI.ReadOnly, ForPod: forPod(pod)}
	running, err := k.cache.Load().pods[k.Namespace].Get(m.PodName())
	if err != nil {
		running = nil
	}
	switch {
	case running != nil && running.Status.Phase == corev1.PodSucceeded && (pod.DeletionTimestamp != nil || finished(pod)):
		return nil // released: the volume is unpublished
	case running == nil || !alive(running):
		if finished(pod) {
			return nil
		}
	default:
		if last, ok := w.refreshed.Load(m.Key()); ok && time.Since(last.(time.Time)) < inlineCredentialsEvery {
			return nil
		}
	}
	vol, err := inline.Volume(handle, v.CSI.VolumeAttributes)
	if err != nil {
		return err
	}
	m.Volume = vol
	rules, err := inline.Load(k.InlineAllowFile)
	if err != nil {
		return err
	}
	if err := rules.Allows(pod.Namespace, vol.ID); err != nil {
		return err
	}
	creds, err := k.inlineCredentials(ctx, pod.Namespace, v.CSI.NodePublishSecretRef)
	if err != nil {
		return err
	}
	if running != nil && alive(running) {
		w.refreshed.Store(m.Key(), time.Now())
		return k.refreshInline(ctx, running, m, creds)
	}
	if err := k.withinLimit(pod.Namespace, rules.MountersFor(pod.Namespace)); err != nil {
		return err
	}
	_, err = k.Launch(ctx, m, creds)
	return err
}

// withinLimit refuses a new inline mounter for namespace once it runs
// limit of them: they run in the driver's namespace, outside the
// tenant's ResourceQuota.
func (k *Kube) withinLimit(namespace string, limit int) error {
	pods, err := k.cache.Load().pods[k.Namespace].List(labels.Everything())
	if err != nil {
		return err
	}
	n := 0
	for _, p := range pods {
		if strings.HasPrefix(p.Annotations[spec.AnnotationForPod], namespace+"/") && alive(p) {
			n++
		}
	}
	if n >= limit {
		return fmt.Errorf("%w: namespace %q runs %d inline volume mounters, its limit (maxMounters of its rules in inline.allow)", ErrInlineLimit, namespace, n)
	}
	return nil
}

// ErrInlineLimit: a namespace has as many inline volume mounters as its
// rules allow.
var ErrInlineLimit = errors.New("too many inline volumes")

// inlineCredentials reads the Secret an inline volume names, in its pod's
// namespace: an inline volume never gets the driver's own keys.
func (k *Kube) inlineCredentials(ctx context.Context, namespace string, ref *corev1.LocalObjectReference) (map[string][]byte, error) {
	if ref == nil || ref.Name == "" {
		return nil, fmt.Errorf("%w: an inline objfuse volume names a Secret of its namespace with its S3 keys (nodePublishSecretRef: {name: ...}, keys accessKeyID and secretAccessKey)", ErrNoCredentials)
	}
	s, err := k.Client.CoreV1().Secrets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the volume's nodePublishSecretRef: %w", err)
	}
	data := map[string]string{}
	for key, v := range s.Data {
		data[key] = string(v)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: Secret %s/%s is empty: it needs keys accessKeyID and secretAccessKey", ErrNoCredentials, namespace, ref.Name)
	}
	return k.Credentials.For(data, "nodePublishSecretRef")
}

// refreshInline copies rotated credentials into a running inline
// mounter's Secret (credsync.go does this for PVCs' mounters).
func (k *Kube) refreshInline(ctx context.Context, pod *corev1.Pod, m spec.Mounter, creds map[string][]byte) error {
	defer k.lock(m)()
	have, err := k.mounterSecret(ctx, pod.Namespace, m.SecretName())
	if err != nil || sameData(have.Data, creds) || !ownedBy(have, pod) {
		return nil // being made or torn down; the next resync looks again
	}
	have.Data = creds
	if _, err := k.Client.CoreV1().Secrets(pod.Namespace).Update(ctx, have, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("update mounter secret %s: %w", have.Name, err)
	}
	return nil
}

// stopInline stops the mounters of the inline volumes of the pod that
// ref names (spec.Mounter.ForPod; one that ends in "/" names every pod of
// that namespace and name); only those that exited, with exited. The
// stops run off the caller: each waits for its mounter to drain.
func (k *Kube) stopInline(ctx context.Context, w *inlineWatch, ref string, exited bool) error {
	pods, err := k.mounterPods(ctx)
	if err != nil {
		return err
	}
	for _, pod := range pods {
		if !matchesPod(pod.Annotations[spec.AnnotationForPod], ref) || pod.Namespace != k.Namespace || (exited && alive(pod)) {
			continue
		}
		m := spec.Mounter{VolumeID: pod.Annotations[spec.AnnotationVolume], NodeID: pod.Annotations[spec.AnnotationNode]}
		if _, busy := w.stopping.LoadOrStore(m.Key(), true); busy {
			continue
		}
		k.Logger.Info("stopping the mounter of an inline volume", "pod", ref, "volume", m.VolumeID, "node", m.NodeID, "exited", !alive(pod))
		w.stops.Go(func() {
			defer w.stopping.Delete(m.Key())
			defer w.refreshed.Delete(m.Key())
			if err := k.Stop(ctx, m); err != nil {
				k.Logger.Warn("stop the mounter of an inline volume", "volume", m.VolumeID, "node", m.NodeID, "err", err)
			}
		})
	}
	return nil
}

func matchesPod(have, ref string) bool {
	if strings.HasSuffix(ref, "/") {
		return strings.HasPrefix(have, ref)
	}
	return have == ref
}

// inlineWanted says whether the mounter pod of an inline volume (its
// AnnotationForPod is ref) may still serve a pod: one of that name and
// UID, in a namespace the allow-list still names. Whatever cannot be
// told is wanted.
func (k *Kube) inlineWanted(ctx context.Context, ref string) bool {
	parts := strings.SplitN(ref, "/", 3)
	if len(parts) != 3 {
		return true
	}
	if rules, err := inline.Load(k.InlineAllowFile); err == nil && !slices.Contains(rules.Namespaces(), parts[0]) {
		return false // taken off the list: the admin revoked it
	}
	var pod *corev1.Pod
	var err error
	if w := k.inline.Load(); w != nil && w.pods[parts[0]] != nil {
		pod, err = w.pods[parts[0]].Get(parts[1])
	} else {
		pod, err = k.Client.CoreV1().Pods(parts[0]).Get(ctx, parts[1], metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		return true
	}
	return string(pod.UID) == parts[2]
}
