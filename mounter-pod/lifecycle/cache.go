package lifecycle

import (
	"context"
	"fmt"
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// clusterCache is the watch-fed copy of what the periodic passes read
// every few seconds: VolumeAttachments, PersistentVolumes, and the mounter
// pods and Secrets in its namespace. Between changes the passes then cost
// the API server nothing, and the client's rate limit is left to CSI
// calls (a list per pass and a get per volume would use it all up with a
// few dozen volumes).
type clusterCache struct {
	cluster, local informers.SharedInformerFactory

	vas     storagelisters.VolumeAttachmentLister
	pvs     corelisters.PersistentVolumeLister
	pods    corelisters.PodNamespaceLister
	secrets corelisters.SecretNamespaceLister
}

// cacheResync is how often the informers replay their whole contents;
// the passes poll on their own, so a rare one is enough.
const cacheResync = 10 * time.Minute

func newClusterCache(kc kubernetes.Interface, namespace string) *clusterCache {
	cluster := informers.NewSharedInformerFactory(kc, cacheResync)
	// Only objfuse's own pods and Secrets of its namespace.
	local := informers.NewSharedInformerFactoryWithOptions(kc, cacheResync, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = spec.LabelComponent + "=" + spec.ComponentMounter }))
	return &clusterCache{
		cluster: cluster, local: local,
		vas:     cluster.Storage().V1().VolumeAttachments().Lister(),
		pvs:     cluster.Core().V1().PersistentVolumes().Lister(),
		pods:    local.Core().V1().Pods().Lister().Pods(namespace),
		secrets: local.Core().V1().Secrets().Lister().Secrets(namespace),
	}
}

// start fills the cache and keeps it current until ctx ends.
func (c *clusterCache) start(ctx context.Context) error {
	c.cluster.Start(ctx.Done())
	c.local.Start(ctx.Done())
	for _, synced := range []map[reflect.Type]bool{c.cluster.WaitForCacheSync(ctx.Done()), c.local.WaitForCacheSync(ctx.Done())} {
		for typ, ok := range synced {
			if !ok {
				return fmt.Errorf("the cache of %v did not fill before shutdown", typ)
			}
		}
	}
	return nil
}

// startCache fills the cache the periodic passes read.
func (k *Kube) startCache(ctx context.Context) error {
	c := newClusterCache(k.Client, k.Namespace)
	if err := c.start(ctx); err != nil {
		return err
	}
	k.cache = c
	return nil
}
