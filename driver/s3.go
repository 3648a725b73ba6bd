package driver

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/volume"
)

// credentials are a CSI call's mounter credentials (lifecycle.Credentials),
// or the gRPC status of why there are none.
func (d *Driver) credentials(secrets map[string]string, secretParam string) (map[string][]byte, error) {
	creds, err := d.creds.For(secrets, secretParam)
	switch {
	case errors.Is(err, lifecycle.ErrNoCredentials):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case err != nil:
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return creds, nil
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
	creds := d.creds.Default()
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
