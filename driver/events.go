package driver

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// EventSink tells users about what the node did to their volumes.
type EventSink interface {
	// VolumeRepaired reports a mount rebuilt under the pods using targets.
	VolumeRepaired(ctx context.Context, volumeID string, targets []string)
}

type logEvents struct{ log *slog.Logger }

func (l logEvents) VolumeRepaired(_ context.Context, volumeID string, targets []string) {
	l.log.Info("event: volume repaired", "volume", volumeID, "targets", targets)
}

// kubeEvents records Events on the pods whose volume was repaired, where
// `kubectl describe pod` shows them.
type kubeEvents struct {
	client     kubernetes.Interface
	recorder   record.EventRecorder
	node       string
	kubeletDir string
	log        *slog.Logger
}

func newKubeEvents(client kubernetes.Interface, driver, node, kubeletDir string, log *slog.Logger) *kubeEvents {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &kubeEvents{
		client:     client,
		recorder:   b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: driver, Host: node}),
		node:       node,
		kubeletDir: kubeletDir,
		log:        log,
	}
}

const reasonRepaired = "ObjfuseMountRepaired"

func (k *kubeEvents) VolumeRepaired(ctx context.Context, volumeID string, targets []string) {
	uids := map[string]bool{}
	for _, t := range targets {
		if uid := podUIDOf(k.kubeletDir, t); uid != "" {
			uids[uid] = true
		}
	}
	if len(uids) == 0 {
		return
	}
	pods, err := k.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", k.node).String()})
	if err != nil {
		k.log.Warn("event: list pods", "err", err)
		return
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if uids[string(p.UID)] {
			k.recorder.Eventf(p, corev1.EventTypeWarning, reasonRepaired,
				"The objfuse mounter of volume %s restarted and the node plugin re-mounted the volume. Containers with mountPropagation HostToContainer see it again; other containers of this pod must be restarted to use it.", volumeID)
		}
	}
}

// podUIDOf reads the pod UID out of a kubelet target path,
// <kubelet>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount.
func podUIDOf(kubeletDir, target string) string {
	rel, err := filepath.Rel(filepath.Join(kubeletDir, "pods"), target)
	if err != nil || strings.HasPrefix(rel, "..") {
		return ""
	}
	uid, _, _ := strings.Cut(rel, string(filepath.Separator))
	return uid
}
