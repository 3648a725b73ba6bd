package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

// Config is what Kube needs to know.
type Config struct {
	Client    kubernetes.Interface
	Namespace string // of the mounter pods and their Secrets
	// PVCNamespaces are the other namespaces mounters may run in: those
	// of PVCs whose StorageClass says mounterNamespace: pvc
	// (namespaces.go).
	PVCNamespaces []string
	Template      spec.Template
	// Driver is the CSI driver's name: the VolumeAttachments and
	// PersistentVolumes that name it are the ones whose mounters Kube
	// keeps.
	Driver string
	// Volumes are the driver's defaults for what a volume's context
	// leaves out, as ControllerPublishVolume reads it: a relaunch must
	// start the mounter it did.
	Volumes volume.Defaults
	// Credentials make a publish Secret into a mounter's credentials, as
	// for ControllerPublishVolume.
	Credentials Credentials
	// Events records the passes' Events on PersistentVolumes; nil
	// records them through Client.
	Events record.EventRecorder
	// ReadyTimeout bounds Launch's wait for the pod to run; 0 means 90s.
	ReadyTimeout time.Duration
	// Poll is how often the pod is checked; tests shorten it.
	Poll time.Duration
	// CredentialsSyncEvery is how often rotated credentials are copied
	// into mounter Secrets; 0 means credentialsSyncEvery.
	CredentialsSyncEvery time.Duration
	// MounterCheckEvery is how often every attached volume is checked to
	// have its mounter pod; 0 means mounterCheckEvery.
	MounterCheckEvery time.Duration
	// InlineAllowFile is the allow-list of inline volumes (inline.Rules):
	// which namespaces' pods may declare which buckets, read at start for
	// the namespaces to watch and again at each launch. "" allows none.
	InlineAllowFile string
	// DetachGrace is how long no pod on a node needs a PVC volume before
	// the controller deletes its attachment (attach.go); 0 means
	// detachGrace.
	DetachGrace time.Duration
	Logger      *slog.Logger
}

// Kube runs each mounter as a pod in Namespace and keeps it right.
type Kube struct {
	Config
	locks   sync.Map // spec.Mounter.Key → *sync.Mutex (lock)
	metrics *metrics
	// cache feeds the periodic passes; nil until Run fills it, and then
	// the passes read the API server instead.
	cache atomic.Pointer[clusterCache]
	// syncProblems: volume → why its credentials are not synced, as last
	// told (credentials sync pass only).
	syncProblems map[string]string
	// inline is the watch of pods that may declare inline volumes, once
	// it runs (inline.go).
	inline atomic.Pointer[inlineWatch]
	// attach is the watch of scheduled pods for the attachments of their
	// volumes, once it runs (attach.go).
	attach atomic.Pointer[attachWatch]
}

var _ Launcher = (*Kube)(nil)

// NewKube returns a Kube of cfg, its defaults filled in.
func NewKube(cfg Config) *Kube {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Events == nil {
		cfg.Events = newRecorder(cfg.Client, cfg.Driver)
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 90 * time.Second
	}
	if cfg.Poll == 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.CredentialsSyncEvery == 0 {
		cfg.CredentialsSyncEvery = credentialsSyncEvery
	}
	if cfg.DetachGrace == 0 {
		cfg.DetachGrace = detachGrace
	}
	if cfg.MounterCheckEvery == 0 {
		cfg.MounterCheckEvery = mounterCheckEvery
	}
	return &Kube{Config: cfg, metrics: newMetrics(), syncProblems: map[string]string{}}
}

// newRecorder records Events through the API as the driver.
func newRecorder(client kubernetes.Interface, driver string) record.EventRecorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: driver})
}

// orphanCheckEvery is how often mounter pods are checked for orphans.
const orphanCheckEvery = time.Minute

// Run fills the cluster cache, then runs the periodic passes until ctx
// ends: orphan collection, credentials sync and mounter relaunch; and
// the mounters of inline volumes (inline.go); and the attachments of PVC
// volumes, where the CSIDriver leaves them to the driver (attach.go).
func (k *Kube) Run(ctx context.Context) {
	// Until the cache fills, no scheduled pod's volume is attached: a
	// brief API error at start must not leave it so until a restart.
	for delay := time.Second; ; delay = min(2*delay, time.Minute) {
		err := k.startCache(ctx)
		if err == nil {
			break
		}
		k.Logger.Error("cluster cache, retried: until it fills, no volume is attached for scheduled pods and no orphan collection, credentials sync or mounter relaunch runs", "err", err, "retry", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
	passes := []struct {
		every time.Duration
		run   func(context.Context) (int, error)
		what  string
	}{
		{orphanCheckEvery, k.collectOrphans, "orphan collection"},
		{k.CredentialsSyncEvery, k.syncCredentials, "credentials sync"},
		{k.MounterCheckEvery, k.relaunchMissing, "mounter check"},
	}
	var wg sync.WaitGroup
	wg.Go(func() { k.runInline(ctx) })
	wg.Go(func() { k.runAttach(ctx) })
	for _, p := range passes {
		wg.Go(func() {
			every(ctx, p.every, func() {
				if _, err := p.run(ctx); err != nil {
					k.Logger.Warn(p.what, "err", err)
				}
			})
		})
	}
	wg.Wait()
}

// every runs pass each period, the first time one period from now, until
// ctx ends.
func every(ctx context.Context, period time.Duration, pass func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pass()
	}
}

// lock serialises what Kube does to one mounter (a launch, a stop, a
// relaunch, an orphan's collection), so that a pass never undoes a
// publish that adopted the pod meanwhile.
func (k *Kube) lock(m spec.Mounter) (unlock func()) {
	l, _ := k.locks.LoadOrStore(m.Key(), &sync.Mutex{})
	mu := l.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// NodeExists says whether the cluster has a node of this name.
func (k *Kube) NodeExists(ctx context.Context, nodeID string) (bool, error) {
	_, err := k.Client.CoreV1().Nodes().Get(ctx, nodeID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// mounterPods lists the mounter pods, from the cache when there is one.
// They are shared with the cache: not to be changed.
func (k *Kube) mounterPods(ctx context.Context) ([]*corev1.Pod, error) {
	selector := spec.Selector
	if c := k.cache.Load(); c != nil {
		sel, err := labels.Parse(selector)
		if err != nil {
			return nil, err
		}
		return c.listPods(sel)
	}
	var out []*corev1.Pod
	for _, ns := range k.namespaces() {
		list, err := k.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if k.forbiddenElsewhere(ns, err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list mounter pods in %s: %w", ns, err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// mounterSecret gets a mounter's Secret, from the cache when there is
// one, as a copy the caller may change.
func (k *Kube) mounterSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	if c := k.cache.Load(); c != nil {
		s, cached, err := c.secret(namespace, name)
		if err != nil {
			return nil, err
		}
		if cached {
			return s.DeepCopy(), nil
		}
	}
	return k.Client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}
