package driver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	ambiguous := map[string]bool{}
	for _, pv := range pvs {
		c := pv.Spec.CSI
		if c == nil || c.Driver != d.opts.Name {
			continue
		}
		if old, seen := refs[c.VolumeHandle]; seen && !sameRef(old, c.ControllerPublishSecretRef) {
			// Static PVs of one bucket with different secrets: which
			// one published the mounter is not known here.
			ambiguous[c.VolumeHandle] = true
		}
		refs[c.VolumeHandle] = c.ControllerPublishSecretRef
	}
	for h := range ambiguous {
		d.log.Warn("credentials sync: PVs of one volume name different secrets; not syncing it", "volume", h)
		delete(refs, h)
	}
	// Each Secret is read once per pass, however many volumes share it.
	type result struct {
		creds map[string][]byte
		ok    bool
	}
	read := map[string]result{}
	current := func(volumeID string) (map[string][]byte, bool) {
		ref, known := refs[volumeID]
		if !known {
			return nil, false // not a PV of ours (yet, or any more)
		}
		key := ""
		if ref != nil {
			key = ref.Namespace + "/" + ref.Name
		}
		if r, done := read[key]; done {
			return r.creds, r.ok
		}
		creds, err := d.publishCredentials(ctx, ref)
		if err != nil {
			d.log.Warn("credentials sync: cannot read the volume's secret", "volume", volumeID, "secret", key, "err", err)
		}
		read[key] = result{creds, err == nil}
		return creds, err == nil
	}
	n, err := k.RefreshCredentials(ctx, current)
	d.metrics.credentialUpdates.Add(float64(n))
	return n, err
}

// publishCredentials are the mounter credentials ControllerPublishVolume
// would make from the Secret ref names (nil: the driver's own defaults).
func (d *Driver) publishCredentials(ctx context.Context, ref *corev1.SecretReference) (map[string][]byte, error) {
	var secrets map[string]string
	if ref != nil {
		s, err := d.opts.KubeClient.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if len(s.Data) == 0 {
			// credentials() would fall back to the driver's defaults.
			return nil, fmt.Errorf("secret %s/%s is empty", ref.Namespace, ref.Name)
		}
		secrets = map[string]string{}
		for k, v := range s.Data {
			secrets[k] = string(v)
		}
	}
	return d.credentials(secrets, publishSecret)
}

func sameRef(a, b *corev1.SecretReference) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
