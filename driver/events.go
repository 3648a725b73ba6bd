package driver

import (
	"context"
	"fmt"
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

// EventSink tells users about their volumes on the node.
type EventSink interface {
	// Tell records an Event (type corev1.EventTypeNormal or Warning) on
	// the pods whose volume is mounted at targets; an error says the
	// pods could not be found, and the Event was not recorded.
	Tell(ctx context.Context, targets []string, eventType, reason, message string) error
}

type logEvents struct{ log *slog.Logger }

func (l logEvents) Tell(_ context.Context, targets []string, eventType, reason, message string) error {
	l.log.Info("event", "type", eventType, "reason", reason, "message", message, "targets", targets)
	return nil
}

// kubeEvents records Events on pods, where `kubectl describe pod` shows
// them.
type kubeEvents struct {
	client     kubernetes.Interface
	recorder   record.EventRecorder
	node       string
	kubeletDir string
	log        *slog.Logger
}

// newRecorder records Events through the API as component (on host).
func newRecorder(client kubernetes.Interface, component, host string) record.EventRecorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component, Host: host})
}

func newKubeEvents(client kubernetes.Interface, driver, node, kubeletDir string, log *slog.Logger) *kubeEvents {
	return &kubeEvents{
		client:     client,
		recorder:   newRecorder(client, driver, node),
		node:       node,
		kubeletDir: kubeletDir,
		log:        log,
	}
}

// Reasons of the node's Events.
const (
	reasonRepaired     = "ObjfuseMountRepaired"
	reasonS3Problem    = "ObjfuseS3Problem"
	reasonS3Recovered  = "ObjfuseS3Recovered"
	reasonUploadFailed = "ObjfuseUploadFailed"
	reasonConflict     = "ObjfuseWriteConflict"
)

// Reasons of the controller's Events on PersistentVolumes.
const (
	reasonCredentialsNotSynced = "ObjfuseCredentialsNotSynced"
	reasonCredentialsSynced    = "ObjfuseCredentialsSynced"
)

func (k *kubeEvents) Tell(ctx context.Context, targets []string, eventType, reason, message string) error {
	uids := map[string]bool{}
	for _, t := range targets {
		if uid := podUIDOf(k.kubeletDir, t); uid != "" {
			uids[uid] = true
		}
	}
	if len(uids) == 0 {
		return nil
	}
	pods, err := k.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", k.node).String()})
	if err != nil {
		k.log.Warn("event: list pods", "reason", reason, "err", err)
		return fmt.Errorf("list the pods of node %s: %w", k.node, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if uids[string(p.UID)] {
			k.recorder.Event(p, eventType, reason, message)
		}
	}
	return nil
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
