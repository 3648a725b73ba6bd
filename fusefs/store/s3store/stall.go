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
// upload whose requests move no byte, either way, for this long is cut,
// and one whose answer has not begun answerWaits times as long after its
// body was sent (a server that works before it answers: a large
// CompleteMultipartUpload on a server that sends no keep-alive spaces).
// Without it a close(2) that waits for its upload could hang for as long
// as an endpoint that accepted the connection chooses: the HTTP transport
// has no write timeout, and minio-go retries a request whose answer never
// came ten times over.
const DefaultStallTimeout = 30 * time.Second

// answerWaits: see DefaultStallTimeout.
const answerWaits = 4

// errStalled is the cause of a try's context cut by its watch.
var errStalled = errors.New("no byte moved")

// progressKey marks a request context whose bytes a watch counts.
type progressKey struct{}

// monoBase anchors mono: times compared across goroutines as integers
// keep the monotonic clock's order (a wall clock can step).
var monoBase = time.Now()

// mono is the time since monoBase.
func mono() int64 { return int64(time.Since(monoBase)) }

// watch cuts a context once the requests made under it have moved no
// byte for d (body bytes read by the transport, a response's header or
// body bytes received) or, after a request's body was all sent, its
// answer has not begun within answerWaits×d.
type watch struct {
	d       time.Duration
	last    atomic.Int64 // mono() of the latest progress
	waiting atomic.Bool  // a request's body is sent, its answer not begun
	timer   *time.Timer
}

// watchProgress returns ctx with a watch that cancels it with cause
// errStalled (see watch), and the function that ends the watch (call it
// when the try is done).
func watchProgress(ctx context.Context, d time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &watch{d: d}
	w.touch()
	var check func()
	check = func() {
		limit := w.d
		if w.waiting.Load() {
			limit *= answerWaits
		}
		if idle := time.Duration(mono() - w.last.Load()); idle < limit {
			w.timer.Reset(limit - idle)
			return
		}
		cancel(errStalled)
	}
	w.timer = time.AfterFunc(time.Hour, check)
	w.timer.Reset(d)
	return context.WithValue(ctx, progressKey{}, w), func() {
		w.timer.Stop()
		cancel(nil)
	}
}

func (w *watch) touch() { w.last.Store(mono()) }

// sent marks a request's body as all sent: its answer is waited for.
func (w *watch) sent() {
	w.touch()
	w.waiting.Store(true)
}

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
		w.touch()
		w.waiting.Store(false)
		req = req.WithContext(req.Context()) // a copy: a RoundTripper must not change its request
		req.Body = &touching{ReadCloser: req.Body, w: w, left: req.ContentLength, sending: true}
	} else {
		w.sent()
	}
	resp, err := p.inner.RoundTrip(req)
	if err == nil {
		w.waiting.Store(false)
		w.touch()
		resp.Body = &touching{ReadCloser: resp.Body, w: w}
	}
	return resp, err
}

// CloseIdleConnections reaches the inner transport.
func (p progressCounting) CloseIdleConnections() { closeIdle(p.inner) }

// touching is a body whose reads are progress; a request's (sending),
// once read to its end (left bytes, or EOF), leaves its answer waited for.
type touching struct {
	io.ReadCloser
	w       *watch
	left    int64 // of a request's body, when known (else -1)
	sending bool
}

func (t *touching) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if n > 0 {
		t.w.touch()
		t.left -= int64(n)
	}
	if t.sending && (err != nil || t.left == 0) {
		t.w.sent()
	}
	return n, err
}
