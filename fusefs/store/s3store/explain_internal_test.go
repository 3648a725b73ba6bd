package s3store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store"
)

// Each failure is explained as the kind of problem it is: what a user
// must fix (credentials, a bucket), a refusal that waiting will not
// change, or an outage that it may.
func TestExplainSaysWhatKindOfFailure(t *testing.T) {
	cases := []struct {
		err     error
		kind    error
		refused bool
	}{
		{minio.ErrorResponse{Code: "NoSuchBucket", StatusCode: 404}, store.ErrNoBucket, false},
		{minio.ErrorResponse{Code: "InvalidAccessKeyId", StatusCode: 403}, store.ErrAccess, false},
		{minio.ErrorResponse{Code: "BucketAlreadyExists", StatusCode: 409}, ErrBucketTaken, false},
		{minio.ErrorResponse{Code: "BucketAlreadyOwnedByYou", StatusCode: 409}, ErrBucketOwned, false},
		{minio.ErrorResponse{Code: "OperationAborted", StatusCode: 409}, store.ErrUnavailable, true},
		{minio.ErrorResponse{Code: "MethodNotAllowed", StatusCode: 405}, store.ErrUnavailable, true},
		{minio.ErrorResponse{Code: "SlowDown", StatusCode: 503}, store.ErrUnavailable, false},
		{fmt.Errorf("dial tcp: connection refused"), store.ErrUnavailable, false},
		{context.DeadlineExceeded, store.ErrUnavailable, false},
	}
	for _, tc := range cases {
		got := explain(tc.err, "http://s3", "b")
		if !errors.Is(got, tc.kind) || errors.Is(got, ErrRefused) != tc.refused {
			t.Errorf("%v: %v; want %v, refused %v", tc.err, got, tc.kind, tc.refused)
		}
	}
}
