package driver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objfuse/objfuse/mounter-pod/launcher"
)

// credentialsSyncEvery is how often the controller copies rotated
// credentials into the mounters' Secrets. With kubelet's update of the
// mounted files (about a minute) and the mounter's re-read (a second), a
// rotation reaches running mounts within two minutes or so; S3 session
// tokens live for an hour at least.
const credentialsSyncEvery = 30 * time.Second

// syncCredentialsLoop keeps every mounter's credentials equal to the
// Secret its PersistentVolume names for ControllerPublish. Kubernetes
// hands secrets to the driver only in CSI calls, and a mount lives much
// longer than one: without this, rotating a StorageClass's keys, or an
// expiring session token, would break every running mount.
func (d *Driver) syncCredentialsLoop(ctx context.Context) {
	k, ok := d.opts.Launcher.(*launcher.Kube)
	if !ok {
		return
	}
	t := time.NewTicker(d.opts.CredentialsSyncEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := d.syncCredentials(ctx, k); err != nil {
			d.log.Warn("credentials sync", "err", err)
		}
	}
}

// syncCredentials is one pass of syncCredentialsLoop; it returns how many
// mounter Secrets it changed.
func (d *Driver) syncCredentials(ctx context.Context, k *launcher.Kube) (int, error) {
	pvs, err := d.opts.KubeClient.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list persistent volumes: %w", err)
	}
	refs := map[string]*corev1.SecretReference{} // volume handle → its publish secret
	for _, pv := range pvs.Items {
		if c := pv.Spec.CSI; c != nil && c.Driver == d.opts.Name {
			refs[c.VolumeHandle] = c.ControllerPublishSecretRef
		}
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
		secrets = map[string]string{}
		for k, v := range s.Data {
			secrets[k] = string(v)
		}
		for k, v := range s.StringData {
			secrets[k] = v
		}
	}
	return d.credentials(secrets, publishSecret)
}
