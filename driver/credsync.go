package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objfuse/objfuse/mounter-pod/launcher"
)

// credentialsSyncEvery is how often the controller copies rotated
// credentials into the mounters' Secrets. With kubelet's update of the
// mounted files (about a minute) and the mounter's re-read (a second), a
// rotation reaches running mounts within two minutes or so: renew session
// tokens (15 minutes at the shortest) that long before they expire.
const credentialsSyncEvery = 30 * time.Second

// syncCredentials keeps every mounter's credentials equal to the Secret
// its PersistentVolume names for ControllerPublish, and returns how many
// mounter Secrets it changed. Kubernetes hands secrets to the driver only
// in CSI calls, and a mount lives much longer than one: without this,
// rotating a StorageClass's keys, or an expiring session token, would
// break every running mount. The controller runs it every
// CredentialsSyncEvery.
func (d *Driver) syncCredentials(ctx context.Context, k *launcher.Kube) (int, error) {
	pvs, err := d.cache.pvs.List(labels.Everything())
	if err != nil {
		return 0, fmt.Errorf("list persistent volumes: %w", err)
	}
	refs := map[string]*corev1.SecretReference{} // volume handle → its publish secret
	pvsOf := map[string][]*corev1.PersistentVolume{}
	ambiguous := map[string]bool{}
	for _, pv := range pvs {
		c := pv.Spec.CSI
		if c == nil || c.Driver != d.opts.Name {
			continue
		}
		pvsOf[c.VolumeHandle] = append(pvsOf[c.VolumeHandle], pv)
		if old, seen := refs[c.VolumeHandle]; seen && !sameRef(old, c.ControllerPublishSecretRef) {
			ambiguous[c.VolumeHandle] = true
		}
		refs[c.VolumeHandle] = c.ControllerPublishSecretRef
	}
	for h := range ambiguous {
		delete(refs, h)
	}
	// Why volumes with mounters are not synced, and which are.
	notSynced, synced := map[string]string{}, map[string]bool{}
	// Each Secret is read once per pass, however many volumes share it.
	type result struct {
		creds map[string][]byte
		ok    bool
		why   string // when not ok
	}
	read := map[string]result{}
	current := func(volumeID string) (map[string][]byte, bool) {
		if ambiguous[volumeID] {
			// Static PVs of one bucket with different secrets: which
			// one published the mounter is not known here.
			notSynced[volumeID] = "its PersistentVolumes name different Secrets (controllerPublishSecretRef), and which one its mounters were given is not known"
			return nil, false
		}
		ref, known := refs[volumeID]
		if !known {
			return nil, false // not a PV of ours (yet, or any more)
		}
		key := ""
		if ref != nil {
			key = ref.Namespace + "/" + ref.Name
		}
		r, done := read[key]
		if !done {
			creds, err := d.publishCredentials(ctx, ref)
			r = result{creds: creds, ok: err == nil}
			switch {
			case err == nil:
			case errors.Is(err, errUnusableSecret) || apierrors.IsNotFound(err):
				r.why = fmt.Sprintf("its Secret %s (controllerPublishSecretRef): %v", key, err)
			default:
				// The API's trouble (a timeout, throttling), not the
				// Secret's: told to no one, tried again next pass.
				d.log.Warn("credentials sync: read the volume's secret", "volume", volumeID, "secret", key, "err", err)
			}
			read[key] = r
		}
		switch {
		case r.ok:
			synced[volumeID] = true
		case r.why != "":
			notSynced[volumeID] = r.why
		}
		return r.creds, r.ok
	}
	n, err := k.RefreshCredentials(ctx, current)
	d.metrics.credentialUpdates.Add(float64(n))
	d.tellSyncChanges(pvsOf, notSynced, synced)
	return n, err
}

// errUnusableSecret marks a publish Secret that exists but cannot be used.
var errUnusableSecret = errors.New("it cannot be used")

// tellSyncChanges records an Event on the PersistentVolumes of each
// volume whose credentials stopped (or started again) reaching its
// mounters, once per change: `kubectl describe pv` is where whoever
// rotates keys looks when a mount keeps the old ones.
func (d *Driver) tellSyncChanges(pvsOf map[string][]*corev1.PersistentVolume, notSynced map[string]string, synced map[string]bool) {
	for vol, why := range notSynced {
		if d.syncProblems[vol] == why {
			continue
		}
		d.syncProblems[vol] = why
		d.log.Warn("credentials sync: not syncing a volume", "volume", vol, "why", why)
		for _, pv := range pvsOf[vol] {
			d.recorder.Eventf(pv, corev1.EventTypeWarning, reasonCredentialsNotSynced,
				"Changes to this volume's credentials do not reach its running mounts: %s. They keep the keys they have.", why)
		}
	}
	for vol := range d.syncProblems {
		switch {
		case synced[vol]:
			for _, pv := range pvsOf[vol] {
				d.recorder.Event(pv, corev1.EventTypeNormal, reasonCredentialsSynced,
					"The volume's credentials Secret can be used again; its running mounts get its keys.")
			}
			delete(d.syncProblems, vol)
		case len(pvsOf[vol]) == 0:
			delete(d.syncProblems, vol) // its PVs are gone
		}
		// Otherwise still a problem, or not looked at in this pass (its
		// mounters could not be listed): as told.
	}
}

// publishCredentials are the mounter credentials ControllerPublishVolume
// would make from the Secret ref names (nil: the driver's own defaults,
// where its admin allows them for volumes).
func (d *Driver) publishCredentials(ctx context.Context, ref *corev1.SecretReference) (map[string][]byte, error) {
	var secrets map[string]string
	if ref != nil {
		s, err := d.opts.KubeClient.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if len(s.Data) == 0 {
			// credentials() would take it for no Secret at all.
			return nil, fmt.Errorf("%w: secret %s/%s is empty", errUnusableSecret, ref.Namespace, ref.Name)
		}
		secrets = map[string]string{}
		for k, v := range s.Data {
			secrets[k] = string(v)
		}
	}
	creds, err := d.credentials(secrets, publishSecret)
	if err != nil {
		// A gRPC status, for CSI callers: its message is what counts here.
		return nil, fmt.Errorf("%w: %s", errUnusableSecret, status.Convert(err).Message())
	}
	return creds, nil
}

func sameRef(a, b *corev1.SecretReference) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
