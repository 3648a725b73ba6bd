package lifecycle

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// clusterCache is the watch-fed copy of what the periodic passes read
// every few seconds: VolumeAttachments, PersistentVolumes, and the mounter
// pods and Secrets in the namespaces they run in. Between changes the passes then cost
// the API server nothing, and the client's rate limit is left to CSI
// calls (a list per pass and a get per volume would use it all up with a
// few dozen volumes).
type clusterCache struct {
	cluster informers.SharedInformerFactory
	// local has a factory per namespace mounters run in.
	local map[string]informers.SharedInformerFactory

	vas     storagelisters.VolumeAttachmentLister
	pvs     corelisters.PersistentVolumeLister
	pods    map[string]corelisters.PodNamespaceLister
	secrets map[string]corelisters.SecretNamespaceLister
}

// cacheResync is how often the informers replay their whole contents;
// the passes poll on their own, so a rare one is enough.
const cacheResync = 10 * time.Minute

// Secrets are cached only in the driver's namespace (the first of
// namespaces): in a PVC's namespace anyone who may create Secrets could
// label thousands of large ones and fill the controller's memory; there
// the credentials sync gets each mounter's Secret by name.
func newClusterCache(kc kubernetes.Interface, namespaces []string) *clusterCache {
	cluster := informers.NewSharedInformerFactory(kc, cacheResync)
	c := &clusterCache{
		cluster: cluster, local: map[string]informers.SharedInformerFactory{},
		vas:     cluster.Storage().V1().VolumeAttachments().Lister(),
		pvs:     cluster.Core().V1().PersistentVolumes().Lister(),
		pods:    map[string]corelisters.PodNamespaceLister{},
		secrets: map[string]corelisters.SecretNamespaceLister{},
	}
	for _, ns := range namespaces {
		// Only objfuse's own pods and Secrets of the namespace.
		local := informers.NewSharedInformerFactoryWithOptions(kc, cacheResync, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = spec.Selector }))
		c.local[ns] = local
		c.pods[ns] = local.Core().V1().Pods().Lister().Pods(ns)
		if len(c.secrets) == 0 {
			c.secrets[ns] = local.Core().V1().Secrets().Lister().Secrets(ns)
		}
	}
	return c
}

// start fills the cache and keeps it current until ctx ends.
func (c *clusterCache) start(ctx context.Context) error {
	factories := []informers.SharedInformerFactory{c.cluster}
	for _, f := range c.local {
		factories = append(factories, f)
	}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("the cache of %v did not fill before shutdown", typ)
			}
		}
	}
	return nil
}

// listPods lists the cached pods of every namespace that sel selects.
func (c *clusterCache) listPods(sel labels.Selector) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for ns, l := range c.pods {
		pods, err := l.List(sel)
		if err != nil {
			return nil, fmt.Errorf("list cached mounter pods in %s: %w", ns, err)
		}
		out = append(out, pods...)
	}
	return out, nil
}

// secret is the cached mounter Secret of that namespace and name;
// cached is false where Secrets are not cached.
func (c *clusterCache) secret(namespace, name string) (s *corev1.Secret, cached bool, err error) {
	l, ok := c.secrets[namespace]
	if !ok {
		return nil, false, nil
	}
	s, err = l.Get(name)
	return s, true, err
}

// startCache fills the cache the periodic passes read. A PVC namespace
// where the driver may not list pods and Secrets (the chart's Roles
// missing) is left out, and said so: its informers would never fill,
// and every pass would wait on them.
func (k *Kube) startCache(ctx context.Context) error {
	var namespaces []string
	for _, ns := range k.namespaces() {
		if err := k.mayWatch(ctx, ns); err != nil {
			if ns == k.Namespace {
				return err
			}
			k.Logger.Error("the driver may not watch mounter pods and Secrets in a namespace listed for PVC mounters; its mounters are left out of orphan collection, credentials sync and relaunch: grant the chart's Role there (mounter.pvcNamespaces)", "namespace", ns, "err", err)
			continue
		}
		namespaces = append(namespaces, ns)
	}
	c := newClusterCache(k.Client, namespaces)
	if err := c.start(ctx); err != nil {
		return err
	}
	k.cache.Store(c)
	return nil
}

// mayWatch lists one mounter pod and one Secret of ns, to learn whether
// the driver may.
func (k *Kube) mayWatch(ctx context.Context, ns string) error {
	opts := metav1.ListOptions{LabelSelector: spec.Selector, Limit: 1}
	if _, err := k.Client.CoreV1().Pods(ns).List(ctx, opts); err != nil {
		return fmt.Errorf("list mounter pods in %s: %w", ns, err)
	}
	if _, err := k.Client.CoreV1().Secrets(ns).List(ctx, opts); err != nil {
		return fmt.Errorf("list mounter Secrets in %s: %w", ns, err)
	}
	return nil
}
