package s3store

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// RequestObserver is told of every HTTP request the store sends: its
// operation (see Operation), how long until the response's headers came
// (a body streams on after that), and its status: "2xx" … "5xx",
// "canceled" when its caller stopped waiting (an interrupted system call,
// a listing read no further), "timeout" when objfuse's own deadline for
// it passed, or "failed" when no response came otherwise. Retries are
// requests of their own.
type RequestObserver func(op, status string, took time.Duration)

// observed times each request of inner for a RequestObserver (when
// set), and tells health (when set) of each one that worked.
type observed struct {
	inner   http.RoundTripper
	observe RequestObserver
	health  *health
	isMinIO *atomic.Bool
}

func (o observed) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := o.inner.RoundTrip(req)
	var status string
	switch {
	case err == nil:
		status = strconv.Itoa(resp.StatusCode/100) + "xx"
	case stalled(req.Context()):
		status = "timeout" // objfuse's own limit: see watchProgress
	case errors.Is(req.Context().Err(), context.Canceled):
		status = "canceled"
	case errors.Is(req.Context().Err(), context.DeadlineExceeded):
		// A hung endpoint: the case the metric is for.
		status = "timeout"
	default:
		status = "failed"
	}
	if o.isMinIO != nil && err == nil && !o.isMinIO.Load() && resp.Header.Get("Server") == "MinIO" {
		o.isMinIO.Store(true)
	}
	if o.health != nil && err == nil && resp.StatusCode/100 == 2 {
		o.health.worked(start)
	}
	if o.observe != nil {
		o.observe(Operation(req), status, time.Since(start))
	}
	return resp, err
}

// CloseIdleConnections reaches the inner transport, so that the client's
// own CloseIdleConnections still works through the wrapper.
func (o observed) CloseIdleConnections() { closeIdle(o.inner) }

// closeIdle passes CloseIdleConnections on to a wrapped transport.
func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Operation names what an S3 request does, in a few values fit for a
// metric label: LIST, GET, HEAD, PUT, PUT_BATCH (small objects in one
// request, batch.go), UPLOAD_PART, DELETE, POST (starting or completing a
// multipart upload, deleting many keys), else OTHER.
func Operation(req *http.Request) string {
	q := req.URL.Query()
	switch req.Method {
	case http.MethodGet:
		if q.Has("list-type") || q.Has("prefix") || q.Has("delimiter") {
			return "LIST"
		}
		return "GET"
	case http.MethodPut:
		if q.Has("partNumber") {
			return "UPLOAD_PART"
		}
		if req.Header.Get(snowballExtract) == "true" {
			return "PUT_BATCH"
		}
		return "PUT"
	case http.MethodHead, http.MethodDelete, http.MethodPost:
		return req.Method
	}
	return "OTHER"
}
