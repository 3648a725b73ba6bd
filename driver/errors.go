package driver

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
)

// storeCodes is the gRPC code every RPC answers a failed S3 request with,
// by the kind of failure (the store's errors, which s3store wraps with a
// message naming what to check), first match wins: the code tells the
// sidecars whether to retry, the message the user what to fix. hint is
// what the driver adds for its own users.
//
// The exceptions, each in the one place it applies:
//   - CreateVolume in a shared bucket: a missing bucket is
//     FailedPrecondition, for the admin makes it (createPrefix);
//   - DeleteVolume: a missing bucket or marker is success, the volume is
//     gone already (deleteBucket, deletePrefix);
//   - ValidateVolumeCapabilities and the publish calls: a missing bucket
//     or marker is NotFound, as here (checkExists).
var storeCodes = []struct {
	kind error
	code codes.Code
	hint string
}{
	{context.DeadlineExceeded, codes.DeadlineExceeded, ""},
	{context.Canceled, codes.Canceled, ""},
	{s3store.ErrTLS, codes.FailedPrecondition, ""},
	{store.ErrAccess, codes.PermissionDenied, "check accessKeyID and secretAccessKey in the Secret, and their policy"},
	{store.ErrNoBucket, codes.NotFound, ""},
	{store.ErrNotExist, codes.NotFound, ""},
	{store.ErrInvalid, codes.InvalidArgument, ""},
	{s3store.ErrBucketTaken, codes.AlreadyExists, `use a shared bucket (StorageClass parameter "bucket")`},
	{s3store.ErrBucketOwned, codes.AlreadyExists, ""},
	{s3store.ErrTooManyBuckets, codes.ResourceExhausted, `use a shared bucket (StorageClass parameter "bucket")`},
	{s3store.ErrBucketNotEmpty, codes.FailedPrecondition, ""},
	{s3store.ErrRefused, codes.Internal, ""},
	{store.ErrUnavailable, codes.Unavailable, ""},
}

// s3Status turns a failed S3 request, made to do what, into a gRPC status
// (storeCodes). A status already made passes through.
func s3Status(err error, what string) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, c := range storeCodes {
		if errors.Is(err, c.kind) {
			msg := fmt.Sprintf("%s: %v", what, err)
			if c.hint != "" {
				msg += "; " + c.hint
			}
			return status.Error(c.code, msg)
		}
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}
