package lifecycle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
)

// The StorageClass parameters (less their -name and -namespace) that name
// the Secret of a CSI call, as an error about it says.
const (
	ProvisionerSecret = "csi.storage.k8s.io/provisioner-secret"
	PublishSecret     = "csi.storage.k8s.io/controller-publish-secret"
	ExpandSecret      = "csi.storage.k8s.io/controller-expand-secret"
	SnapshotSecret    = "csi.storage.k8s.io/snapshotter-secret"
	ListSecret        = "csi.storage.k8s.io/snapshotter-list-secret"
)

// Keys a credentials Secret holds: the file names the mounter reads.
var secretKeys = []string{s3store.AccessKeyFile, s3store.SecretKeyFile, s3store.SessionTokenFile, s3store.CABundleFile}

// Credentials make the files of a mounter's credentials directory from a
// CSI call's secrets, else from the driver's own directory where its
// admin allows that, with the driver's extra CAs added. A publish and
// the credentials sync (credsync.go) make them alike; the controller's
// own S3 requests use them too.
type Credentials struct {
	// DefaultDir holds the driver's own keys (--s3-credentials-dir).
	DefaultDir string
	// DefaultForVolumes lets a call that carries no secrets (a
	// StorageClass or PV without a Secret) use DefaultDir: an admin's
	// explicit choice, as every such volume then gets the driver's own
	// keys (--s3-credentials-for-volumes). Off, such a call is refused.
	DefaultForVolumes bool
	// CABundle is a PEM file of extra CAs to trust (--ca-bundle).
	CABundle string
}

// ErrNoCredentials marks secrets that hold no usable keys, and no
// default stands in: InvalidArgument to a CSI caller.
var ErrNoCredentials = errors.New("no usable S3 credentials")

// unusable says what is wrong with a call's credentials; it is
// ErrNoCredentials.
type unusable string

func (u unusable) Error() string      { return string(u) }
func (unusable) Is(target error) bool { return target == ErrNoCredentials }

// For picks a call's secrets, else (when the admin allowed it) the
// driver's default credentials, and says clearly what is missing;
// secretParam is the StorageClass parameter that names the call's Secret.
func (c Credentials) For(secrets map[string]string, secretParam string) (map[string][]byte, error) {
	out := map[string][]byte{}
	switch {
	case len(secrets) > 0:
		for _, k := range secretKeys {
			if v, ok := secrets[k]; ok && v != "" {
				out[k] = []byte(v)
			}
		}
	case c.DefaultDir != "" && c.DefaultForVolumes:
		out = c.Default()
	default:
		why := ""
		if c.DefaultDir != "" {
			why = " (the driver's own --s3-credentials-dir serves volumes only when its admin also sets --s3-credentials-for-volumes)"
		}
		class := "StorageClass"
		if secretParam == SnapshotSecret || secretParam == ListSecret {
			class = "VolumeSnapshotClass"
		}
		return nil, unusable(fmt.Sprintf("no S3 credentials: set %s-name and %s-namespace in the %s to a Secret with keys %s and %s%s",
			secretParam, secretParam, class, s3store.AccessKeyFile, s3store.SecretKeyFile, why))
	}
	for _, k := range []string{s3store.AccessKeyFile, s3store.SecretKeyFile} {
		if len(out[k]) == 0 {
			return nil, unusable(fmt.Sprintf("S3 credentials Secret has no key %q: it needs %s and %s", k, s3store.AccessKeyFile, s3store.SecretKeyFile))
		}
	}
	// The driver's own extra CAs go along with the Secret's, so that the
	// mounter pods, which cannot see the driver's files, trust them too.
	if f := c.CABundle; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("the driver's --ca-bundle: %w", err)
		}
		out[s3store.CABundleFile] = joinPEM(out[s3store.CABundleFile], pem)
	}
	return out, nil
}

// Default reads the driver's own credentials directory.
func (c Credentials) Default() map[string][]byte {
	out := map[string][]byte{}
	for _, k := range secretKeys {
		if b, err := os.ReadFile(filepath.Join(c.DefaultDir, k)); err == nil {
			out[k] = b
		}
	}
	return out
}

// joinPEM concatenates two PEM bundles, each block starting on its own line.
func joinPEM(a, b []byte) []byte {
	out := append([]byte{}, a...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, b...)
}
