package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// credentialsSyncEvery is how often Run copies rotated
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
// break every running mount. Run runs it every CredentialsSyncEvery.
func (k *Kube) syncCredentials(ctx context.Context) (int, error) {
	pvs, err := k.cache.Load().pvs.List(labels.Everything())
	if err != nil {
		return 0, fmt.Errorf("list persistent volumes: %w", err)
	}
	refs := map[string]*corev1.SecretReference{} // volume handle → its publish secret
	mounterNS := map[string]string{}             // volume handle → where its mounters run
	pvsOf := map[string][]*corev1.PersistentVolume{}
	ambiguous := map[string]bool{}
	for _, pv := range pvs {
		c := pv.Spec.CSI
		if c == nil || c.Driver != k.Driver {
			continue
		}
		ns := "" // the driver's; also of a PV no mounter could be published for
		if v, err := k.volumeOf(c); err == nil {
			ns = v.Mounter.Namespace
		}
		pvsOf[c.VolumeHandle] = append(pvsOf[c.VolumeHandle], pv)
		if old, seen := refs[c.VolumeHandle]; seen && (!sameRef(old, c.ControllerPublishSecretRef) || mounterNS[c.VolumeHandle] != ns) {
			ambiguous[c.VolumeHandle] = true
		}
		refs[c.VolumeHandle] = c.ControllerPublishSecretRef
		mounterNS[c.VolumeHandle] = ns
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
	current := func(volumeID string) (map[string][]byte, string, bool) {
		if ambiguous[volumeID] {
			// Static PVs of one bucket with different secrets: which
			// one published the mounter is not known here.
			notSynced[volumeID] = "its PersistentVolumes name different Secrets (controllerPublishSecretRef) or mounter namespaces, and which its mounters were given is not known"
			return nil, "", false
		}
		ref, known := refs[volumeID]
		if !known {
			return nil, "", false // not a PV of ours (yet, or any more)
		}
		m := spec.MounterIn(volumeID, "", mounterNS[volumeID])
		if err := OwnSecretNeeded(m, ref != nil); err != nil {
			notSynced[volumeID] = err.Error()
			return nil, "", false
		}
		ns := m.NamespaceOr(k.Namespace)
		key := ""
		if ref != nil {
			key = ref.Namespace + "/" + ref.Name
		}
		r, done := read[key]
		if !done {
			creds, err := k.publishCredentials(ctx, ref)
			r = result{creds: creds, ok: err == nil}
			switch {
			case err == nil:
			case errors.Is(err, errUnusableSecret) || apierrors.IsNotFound(err):
				r.why = fmt.Sprintf("its Secret %s (controllerPublishSecretRef): %v", key, err)
			default:
				// The API's trouble (a timeout, throttling), not the
				// Secret's: told to no one, tried again next pass.
				k.Logger.Warn("credentials sync: read the volume's secret", "volume", volumeID, "secret", key, "err", err)
			}
			read[key] = r
		}
		switch {
		case r.ok:
			synced[volumeID] = true
		case r.why != "":
			notSynced[volumeID] = r.why
		}
		return r.creds, ns, r.ok
	}
	n, err := k.refreshCredentials(ctx, current)
	k.metrics.credentialUpdates.Add(float64(n))
	k.tellSyncChanges(pvsOf, notSynced, synced)
	return n, err
}

// Reasons of the Events on PersistentVolumes whose credentials stop, or
// start again, reaching their mounters.
const (
	reasonCredentialsNotSynced = "ObjfuseCredentialsNotSynced"
	reasonCredentialsSynced    = "ObjfuseCredentialsSynced"
)

// errUnusableSecret marks a publish Secret that exists but cannot be used.
var errUnusableSecret = errors.New("it cannot be used")

// tellSyncChanges records an Event on the PersistentVolumes of each
// volume whose credentials stopped (or started again) reaching its
// mounters, once per change: `kubectl describe pv` is where whoever
// rotates keys looks when a mount keeps the old ones.
func (k *Kube) tellSyncChanges(pvsOf map[string][]*corev1.PersistentVolume, notSynced map[string]string, synced map[string]bool) {
	for vol, why := range notSynced {
		if k.syncProblems[vol] == why {
			continue
		}
		k.syncProblems[vol] = why
		k.Logger.Warn("credentials sync: not syncing a volume", "volume", vol, "why", why)
		for _, pv := range pvsOf[vol] {
			k.Events.Eventf(pv, corev1.EventTypeWarning, reasonCredentialsNotSynced,
				"Changes to this volume's credentials do not reach its running mounts: %s. They keep the keys they have.", why)
		}
	}
	for vol := range k.syncProblems {
		switch {
		case synced[vol]:
			for _, pv := range pvsOf[vol] {
				k.Events.Event(pv, corev1.EventTypeNormal, reasonCredentialsSynced,
					"The volume's credentials Secret can be used again; its running mounts get its keys.")
			}
			delete(k.syncProblems, vol)
		case len(pvsOf[vol]) == 0:
			delete(k.syncProblems, vol) // its PVs are gone
		}
		// Otherwise still a problem, or not looked at in this pass (its
		// mounters could not be listed): as told.
	}
}

// publishCredentials are the mounter credentials ControllerPublishVolume
// would make from the Secret ref names (nil: the driver's own defaults,
// where its admin allows them for volumes).
func (k *Kube) publishCredentials(ctx context.Context, ref *corev1.SecretReference) (map[string][]byte, error) {
	var secrets map[string]string
	if ref != nil {
		s, err := k.Client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if len(s.Data) == 0 {
			// Credentials.For would take it for no Secret at all.
			return nil, fmt.Errorf("%w: secret %s/%s is empty", errUnusableSecret, ref.Namespace, ref.Name)
		}
		secrets = map[string]string{}
		for key, v := range s.Data {
			secrets[key] = string(v)
		}
	}
	creds, err := k.Credentials.For(secrets, PublishSecret)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUnusableSecret, err)
	}
	return creds, nil
}

func sameRef(a, b *corev1.SecretReference) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// refreshCredentials brings each live mounter's credentials Secret up to
// what current(volumeID) says it should hold, and returns how many it
// changed. A Secret copied at publish goes stale when its source is
// rotated (new keys, a renewed session token); kubelet carries the new
// copy into the running mounter's files, which it re-reads, so the
// mount keeps working without a restart. Volumes current does not know
// (ok false) are left alone.
//
// Where others may create pods and Secrets (a PVC's namespace), a pod
// could claim another volume: credentials are written only into the
// Secret owned by the pod of the mounter's name and labels, in the
// namespace its volume's mounters run in (namespace).
func (k *Kube) refreshCredentials(ctx context.Context, current func(volumeID string) (creds map[string][]byte, namespace string, ok bool)) (int, error) {
	pods, err := k.mounterPods(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error // one Secret that fails must not hold up the others
	for _, pod := range pods {
		m := spec.Mounter{VolumeID: pod.Annotations[spec.AnnotationVolume], NodeID: pod.Annotations[spec.AnnotationNode]}
		if m.VolumeID == "" || pod.DeletionTimestamp != nil {
			continue
		}
		want, ns, ok := current(m.VolumeID)
		if !ok || pod.Namespace != ns || pod.Name != m.PodName() || pod.Labels[spec.LabelKey] != m.Key() {
			continue
		}
		have, err := k.mounterSecret(ctx, ns, m.SecretName())
		if apierrors.IsNotFound(err) {
			continue // being created or torn down by a publish call
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("get mounter secret %s: %w", m.SecretName(), err))
			continue
		}
		if sameData(have.Data, want) || !ownedBy(have, pod) {
			continue
		}
		have.Data = want
		_, err = k.Client.CoreV1().Secrets(ns).Update(ctx, have, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue // a publish or unpublish got there first; next pass
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("update mounter secret %s: %w", have.Name, err))
			continue
		}
		k.Logger.Info("updated mounter credentials", "secret", have.Name, "volume", m.VolumeID, "node", m.NodeID)
		n++
	}
	return n, errors.Join(errs...)
}

// ownedBy says whether pod owns s (spec.Mounter.Secret).
func ownedBy(s *corev1.Secret, pod *corev1.Pod) bool {
	for _, o := range s.OwnerReferences {
		if o.Kind == "Pod" && o.UID == pod.UID {
			return true
		}
	}
	return false
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}
