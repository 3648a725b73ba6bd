package driver

import (
	"context"
	"os"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/volume"
)

// Keys a credentials Secret holds: the file names the mounter reads.
var secretKeys = []string{s3store.AccessKeyFile, s3store.SecretKeyFile, s3store.SessionTokenFile, s3store.CABundleFile}

// credentials picks a request's secrets, else (when the admin allowed
// it) the driver's default credentials, and says clearly what is missing.
func (d *Driver) credentials(secrets map[string]string, secretParam string) (map[string][]byte, error) {
	out := map[string][]byte{}
	switch {
	case len(secrets) > 0:
		for _, k := range secretKeys {
			if v, ok := secrets[k]; ok && v != "" {
				out[k] = []byte(v)
			}
		}
	case d.opts.DefaultCredentialsDir != "" && d.opts.DefaultCredentialsForVolumes:
		out = d.defaultCredentials()
	default:
		why := ""
		if d.opts.DefaultCredentialsDir != "" {
			why = " (the driver's own --s3-credentials-dir serves volumes only when its admin also sets --s3-credentials-for-volumes)"
		}
		return nil, status.Errorf(codes.InvalidArgument, "no S3 credentials: set %s-name and %s-namespace in the StorageClass to a Secret with keys %s and %s%s",
			secretParam, secretParam, s3store.AccessKeyFile, s3store.SecretKeyFile, why)
	}
	for _, k := range []string{s3store.AccessKeyFile, s3store.SecretKeyFile} {
		if len(out[k]) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "S3 credentials Secret has no key %q: it needs %s and %s", k, s3store.AccessKeyFile, s3store.SecretKeyFile)
		}
	}
	// The driver's own extra CAs go along with the Secret's, so that the
	// mounter pods, which cannot see the driver's files, trust them too.
	if f := d.opts.CABundle; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "the driver's --ca-bundle: %v", err)
		}
		out[s3store.CABundleFile] = joinPEM(out[s3store.CABundleFile], pem)
	}
	return out, nil
}

// defaultCredentials reads the driver's own credentials directory.
func (d *Driver) defaultCredentials() map[string][]byte {
	out := map[string][]byte{}
	for _, k := range secretKeys {
		if b, err := os.ReadFile(filepath.Join(d.opts.DefaultCredentialsDir, k)); err == nil {
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

// s3Admin connects to a volume's endpoint with creds.
func (d *Driver) s3Admin(s volume.S3, creds map[string][]byte) (*s3store.Admin, error) {
	a, err := s3store.NewAdmin(s3store.Config{
		Endpoint: s.Endpoint, Region: s.Region, PathStyle: s.PathStyle,
		MaxRetries: 2,
		Keys: &s3store.Keys{
			AccessKeyID:     string(creds[s3store.AccessKeyFile]),
			SecretAccessKey: string(creds[s3store.SecretKeyFile]),
			SessionToken:    string(creds[s3store.SessionTokenFile]),
			CABundle:        creds[s3store.CABundleFile],
		},
	})
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "S3 endpoint %s: %v", s.Endpoint, err)
	}
	return a, nil
}

// defaultAdmin is the driver's own S3 client, for ListVolumes and Probe,
// and the S3 settings it was made with.
func (d *Driver) defaultAdmin() (*s3store.Admin, volume.S3, error) {
	def := d.opts.S3Defaults
	s := volume.S3{Endpoint: def.Endpoint, Region: regionOr(def.Region), PathStyle: def.PathStyle}
	if def.Endpoint == "" || d.opts.DefaultCredentialsDir == "" {
		return nil, s, status.Error(codes.FailedPrecondition, "the driver has no default S3 endpoint and credentials (--s3-endpoint, --s3-credentials-dir)")
	}
	creds := d.defaultCredentials()
	for _, k := range []string{s3store.AccessKeyFile, s3store.SecretKeyFile} {
		if len(creds[k]) == 0 {
			return nil, s, status.Errorf(codes.FailedPrecondition, "the driver's --s3-credentials-dir has no file %s", k)
		}
	}
	a, err := d.s3Admin(s, creds)
	return a, s, err
}

func regionOr(r string) string {
	if r == "" {
		return volume.DefaultRegion
	}
	return r
}

// endpointAnswers is nil when the default endpoint gives any S3 answer.
func (d *Driver) endpointAnswers(ctx context.Context) error {
	a, _, err := d.defaultAdmin()
	if err != nil {
		return err
	}
	return a.Answers(ctx)
}
