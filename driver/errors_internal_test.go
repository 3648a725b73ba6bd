package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
)

// Every kind of S3 failure gets its code from the one table, first match
// first: a timeout is DeadlineExceeded though the store also calls it
// unavailable, an untrusted certificate FailedPrecondition (a setting to
// fix), and what no row names is Internal, never OK.
func TestS3FailuresGetTheTablesCodes(t *testing.T) {
	cases := []struct {
		err  error
		code codes.Code
		says string
	}{
		{fmt.Errorf("cannot reach S3 endpoint x: no answer in time: %w: %w", store.ErrUnavailable, context.DeadlineExceeded), codes.DeadlineExceeded, "no answer in time"},
		{fmt.Errorf("x: %w (%w)", store.ErrUnavailable, s3store.ErrTLS), codes.FailedPrecondition, ""},
		{fmt.Errorf("x: %w", store.ErrAccess), codes.PermissionDenied, "check accessKeyID and secretAccessKey"},
		{fmt.Errorf("x: %w", store.ErrNoBucket), codes.NotFound, ""},
		{fmt.Errorf("x: %w", s3store.ErrBucketTaken), codes.AlreadyExists, `parameter "bucket"`},
		{fmt.Errorf("x: %w", s3store.ErrTooManyBuckets), codes.ResourceExhausted, `parameter "bucket"`},
		{fmt.Errorf("x: %w", s3store.ErrBucketNotEmpty), codes.FailedPrecondition, ""},
		{fmt.Errorf("x: %w", store.ErrUnavailable), codes.Unavailable, ""},
		{fmt.Errorf("x (OperationAborted): %w (%w)", store.ErrUnavailable, s3store.ErrRefused), codes.Internal, "OperationAborted"},
		{errors.New("something else"), codes.Internal, "something else"},
		{status.Error(codes.Aborted, "made before"), codes.Aborted, "made before"},
	}
	for _, tc := range cases {
		s := status.Convert(s3Status(tc.err, "do it"))
		if s.Code() != tc.code || !strings.Contains(s.Message(), tc.says) {
			t.Errorf("%v: %s %q, want %s saying %q", tc.err, s.Code(), s.Message(), tc.code, tc.says)
		}
	}
	if s3Status(nil, "do it") != nil {
		t.Error("no failure became a status")
	}
}
