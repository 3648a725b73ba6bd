package s3store

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// DefaultStallTimeout is Config.StallTimeout when none is given: an
// upload whose requests move no byte, either way, for this long is cut.
// Without it a close(2) that waits for its upload could hang for as long
// as an endpoint that accepted the connection chooses not to read: the
// HTTP transport has no write timeout, and minio-go retries a request
// whose response never came ten times over.
const DefaultStallTimeout = 30 * time.Second

// errStalled is the cause of a try's context cut by its watch.
var errStalled = errors.New("no byte moved")

// progressKey marks a request context whose bytes a watch counts.
type progressKey struct{}

// watch cuts a context once the requests made under it have moved no
// byte for d: neither read from a request body by the transport, nor a
// response's header or body bytes received.
type watch struct {
	d     time.Duration
	last  atomic.Int64 // unix nanoseconds of the latest progress
	timer *time.Timer
}

// watchProgress returns ctx with a watch that cancels it with cause
// errStalled after d without progress, and the function that ends the
// watch (call it when the try is done).
func watchProgress(ctx context.Context, d time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &watch{d: d}
	w.touch()
	var check func()
	check = func() {
		if idle := time.Since(time.Unix(0, w.last.Load())); idle < w.d {
			w.timer.Reset(w.d - idle)
			return
		}
		cancel(errStalled)
	}
	w.timer = time.AfterFunc(d, check)
	return context.WithValue(ctx, progressKey{}, w), func() {
		w.timer.Stop()
		cancel(nil)
	}
}

func (w *watch) touch() { w.last.Store(time.Now().UnixNano()) }

// stalled reports whether ctx was cut by its watch.
func stalled(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errStalled)
}

// progressCounting tells a request's watch, if its context has one, of
// every byte its body gives the transport and every byte of the answer.
type progressCounting struct{ inner http.RoundTripper }

func (p progressCounting) RoundTrip(req *http.Request) (*http.Response, error) {
	w, _ := req.Context().Value(progressKey{}).(*watch)
	if w == nil {
		return p.inner.RoundTrip(req)
	}
	if req.Body != nil && req.Body != http.NoBody {
		req = req.WithContext(req.Context()) // a copy: a RoundTripper must not change its request
		req.Body = &touching{ReadCloser: req.Body, w: w}
	}
	resp, err := p.inner.RoundTrip(req)
	if err == nil {
		w.touch()
		resp.Body = &touching{ReadCloser: resp.Body, w: w}
	}
	return resp, err
}

// CloseIdleConnections reaches the inner transport.
func (p progressCounting) CloseIdleConnections() {
	if c, ok := p.inner.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// touching is a body whose reads are progress.
type touching struct {
	io.ReadCloser
	w *watch
}

func (t *touching) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if n > 0 {
		t.w.touch()
	}
	return n, err
}
