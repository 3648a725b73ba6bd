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

// s3Admins make the controller's S3 clients: for a volume with a call's
// credentials, or the driver's own at its default endpoint.
type s3Admins struct {
	defaults volume.Defaults
	creds    lifecycle.Credentials
}

// credentials are a CSI call's mounter credentials (lifecycle.Credentials),
// or the gRPC status of why there are none.
func (a *s3Admins) credentials(secrets map[string]string, secretParam string) (map[string][]byte, error) {
	creds, err := a.creds.For(secrets, secretParam)
	switch {
	case errors.Is(err, lifecycle.ErrNoCredentials):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case err != nil:
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return creds, nil
}

// adminFor connects to endpoint s with the credentials of a CSI call's
// Secret (secretParam names it, for errors about it).
func (a *s3Admins) adminFor(s volume.S3, secrets map[string]string, secretParam string) (*s3store.Admin, error) {
	creds, err := a.credentials(secrets, secretParam)
	if err != nil {
		return nil, err
	}
	return a.admin(s, creds)
}

// admin connects to a volume's endpoint with creds.
func (a *s3Admins) admin(s volume.S3, creds map[string][]byte) (*s3store.Admin, error) {
	admin, err := s3store.NewAdmin(s3store.Config{
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
	return admin, nil
}

// listerFor connects to endpoint s for ListSnapshots: with the call's
// Secret, or without one with the driver's own keys (csi-snapshotter
// sends none when the VolumeSnapshotClass names no list Secret, as for
// a pre-provisioned snapshot without a class).
func (a *s3Admins) listerFor(s volume.S3, secrets map[string]string) (*s3store.Admin, error) {
	if len(secrets) == 0 && a.creds.DefaultDir != "" {
		return a.admin(s, a.creds.Default())
	}
	return a.adminFor(s, secrets, lifecycle.ListSecret)
}

// defaultS3 is the driver's default endpoint, as a volume's S3 settings.
func (a *s3Admins) defaultS3() volume.S3 {
	def := a.defaults
	return volume.S3{Endpoint: def.Endpoint, Region: regionOr(def.Region), PathStyle: def.PathStyle}
}

// defaultAdmin is the driver's own S3 client, for ListVolumes and Probe,
// and the S3 settings it was made with.
func (a *s3Admins) defaultAdmin() (*s3store.Admin, volume.S3, error) {
	def := a.defaults
	s := a.defaultS3()
	if def.Endpoint == "" || a.creds.DefaultDir == "" {
		return nil, s, status.Error(codes.FailedPrecondition, "the driver has no default S3 endpoint and credentials (--s3-endpoint, --s3-credentials-dir)")
	}
	creds := a.creds.Default()
	for _, k := range []string{s3store.AccessKeyFile, s3store.SecretKeyFile} {
		if len(creds[k]) == 0 {
			return nil, s, status.Errorf(codes.FailedPrecondition, "the driver's --s3-credentials-dir has no file %s", k)
		}
	}
	admin, err := a.admin(s, creds)
	return admin, s, err
}

func regionOr(r string) string {
	if r == "" {
		return volume.DefaultRegion
	}
	return r
}

// endpointAnswers is nil when the default endpoint gives any S3 answer.
func (a *s3Admins) endpointAnswers(ctx context.Context) error {
	admin, _, err := a.defaultAdmin()
	if err != nil {
		return err
	}
	return admin.Answers(ctx)
}
