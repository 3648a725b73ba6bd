package driver

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
// them: the pods kubelet named when it published the targets, so that the
// node plugin needs no right to read pods.
type kubeEvents struct {
	recorder record.EventRecorder
	podsAt   func(targets []string) []podRef
	log      *slog.Logger
}

// newRecorder records Events through the API as component (on host).
func newRecorder(client kubernetes.Interface, component, host string) record.EventRecorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component, Host: host})
}

// Reasons of the node's Events.
const (
	reasonRepaired     = "ObjfuseMountRepaired"
	reasonS3Problem    = "ObjfuseS3Problem"
	reasonS3Recovered  = "ObjfuseS3Recovered"
	reasonUploadFailed = "ObjfuseUploadFailed"
	reasonConflict     = "ObjfuseWriteConflict"
	// A mounter's connection handed to its successor, or why not.
	reasonTakenOver      = "ObjfuseMountTakenOver"
	reasonTakeoverFailed = "ObjfuseTakeoverFailed"
	// A mounter upgraded in place to the driver's image, one that could
	// not be, and one left to get it with new pods (node_upgrade.go).
	reasonUpgraded        = "ObjfuseMounterUpgraded"
	reasonUpgradeFailed   = "ObjfuseMounterUpgradeFailed"
	reasonUpgradeLater    = "ObjfuseMounterUpgradeOnRecreate"
	reasonUpgradeDeferred = "ObjfuseMounterUpgradeDeferred"
)

func (k *kubeEvents) Tell(ctx context.Context, targets []string, eventType, reason, message string) error {
	pods := k.podsAt(targets)
	if len(pods) == 0 && len(targets) > 0 {
		// Published before the node kept its pods: told in the log only.
		k.log.Warn("event for no known pod", "reason", reason, "message", message, "targets", targets)
		return nil
	}
	for _, p := range pods {
		k.recorder.Event(&corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID)}, eventType, reason, message)
	}
	return nil
}
