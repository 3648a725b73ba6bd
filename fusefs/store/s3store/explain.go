package s3store

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store"
)

// Errors of bucket administration (Admin), beside the store's own.
var (
	// ErrBucketOwned: the bucket exists and belongs to the caller's
	// account (BucketAlreadyOwnedByYou), made by an earlier call, say.
	ErrBucketOwned = errors.New("bucket already exists")
	// ErrBucketTaken: the name belongs to another account (BucketAlreadyExists).
	ErrBucketTaken = errors.New("bucket name taken by another account")
	// ErrTooManyBuckets: the account may make no more buckets.
	ErrTooManyBuckets = errors.New("too many buckets")
	// ErrBucketNotEmpty: a bucket to remove still holds objects.
	ErrBucketNotEmpty = errors.New("bucket not empty")
	// ErrRefused: S3 refused the request for a reason none of the kinds
	// names (a 4xx such as 405 MethodNotAllowed or 409 OperationAborted):
	// not an outage to wait out. It comes with the store's kind.
	ErrRefused = errors.New("request refused")
	// ErrTLS: the endpoint's certificate is not one the client trusts
	// (or it does not speak TLS): a setting to fix, not an outage. It
	// comes with store.ErrUnavailable.
	ErrTLS = errors.New("TLS handshake with the endpoint failed")
)

// explain turns a failed request to bucket (at endpoint; "" for requests
// about no bucket) into an error a user can act on: a message naming what
// to check, wrapping the store error kind it stands for (store.ErrAccess,
// ErrNoBucket, ErrUnavailable, ... or one of the bucket administration
// errors above) and the failure itself.
func explain(err error, endpoint, bucket string) error {
	if err == nil {
		return nil
	}
	if msg, ok := ExplainTLS(err, endpoint); ok {
		return fmt.Errorf("%s: %w (%w): %w", msg, store.ErrUnavailable, ErrTLS, err)
	}
	if msg, ok := ExplainRegion(err); ok {
		return fmt.Errorf("%s: bucket %q: %s: %w: %w", endpoint, bucket, msg, store.ErrInvalid, err)
	}
	resp := minio.ToErrorResponse(err)
	if bucket == "" {
		bucket = resp.BucketName
	}
	why := func(kind error, format string, args ...any) error {
		return fmt.Errorf("%s: %w: %w", fmt.Sprintf(format, args...), kind, err)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return err
	case resp.Code == "InvalidBucketName":
		return why(store.ErrInvalid, "bucket name %q is not valid: %s", bucket, resp.Message)
	case resp.Code == "NoSuchBucket":
		return why(store.ErrNoBucket, "bucket %q does not exist at %s", bucket, endpoint)
	case resp.Code == "InvalidAccessKeyId":
		return why(store.ErrAccess, "%s does not know the access key (InvalidAccessKeyId): check the credentials", endpoint)
	case resp.Code == "SignatureDoesNotMatch":
		return why(store.ErrAccess, "%s rejected the secret key (SignatureDoesNotMatch): check the credentials", endpoint)
	case resp.Code == "AccessDenied" || resp.StatusCode == http.StatusForbidden:
		return why(store.ErrAccess, "%s denied access to bucket %q (%s): check the credentials and bucket policy", endpoint, bucket, resp.Code)
	case resp.Code == "BucketAlreadyOwnedByYou":
		return why(ErrBucketOwned, "bucket %q exists at %s", bucket, endpoint)
	case resp.Code == "BucketAlreadyExists":
		return why(ErrBucketTaken, "bucket name %q at %s is taken by another account", bucket, endpoint)
	case resp.Code == "TooManyBuckets":
		return why(ErrTooManyBuckets, "%s has too many buckets", endpoint)
	case resp.Code == "BucketNotEmpty":
		return why(ErrBucketNotEmpty, "bucket %q at %s is not empty", bucket, endpoint)
	case resp.Code != "" && resp.StatusCode != 0 && resp.StatusCode < 500:
		kind := mapErr(err)
		if errors.Is(kind, store.ErrUnavailable) {
			kind = fmt.Errorf("%w (%w)", kind, ErrRefused)
		}
		return fmt.Errorf("%s: bucket %q: %s (%s): %w", endpoint, bucket, resp.Message, resp.Code, kind)
	case errors.Is(err, context.DeadlineExceeded):
		return why(store.ErrUnavailable, "cannot reach S3 endpoint %s: no answer in time", endpoint)
	}
	return why(store.ErrUnavailable, "cannot reach S3 endpoint %s", endpoint)
}
