package miniotest

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
)

// CorruptingFront starts a proxy in front of s that inverts one byte of
// the body of every PUT longer than 100 bytes, as a faulty network or
// middlebox would, and returns a configuration that reaches s through it
// and the count of bodies it changed so far. The proxy keeps the Host
// header the client signed, so only the payload differs.
func (s *Server) CorruptingFront(t testing.TB) (s3store.Config, *atomic.Int32) {
	t.Helper()
	var changed atomic.Int32
	cfg := s.front(t, func(proxy *httputil.ReverseProxy) {
		direct := proxy.Director
		proxy.Director = func(r *http.Request) {
			direct(r)
			if r.Method == http.MethodPut && r.ContentLength > 100 {
				r.Body = &flipByte{r: r.Body, at: 100}
				changed.Add(1)
			}
		}
	})
	return cfg, &changed
}

// front starts a reverse proxy to s, set up by configure, for the test's
// duration, and returns a configuration that reaches s through it.
func (s *Server) front(t testing.TB, configure func(*httputil.ReverseProxy)) s3store.Config {
	t.Helper()
	cfg := s.Config()
	cfg.Endpoint = frontOf(t, s.Endpoint, configure)
	return cfg
}

// frontOf starts a reverse proxy to endpoint, set up by configure, for
// the test's duration, and returns its URL.
func frontOf(t testing.TB, endpoint string, configure func(*httputil.ReverseProxy)) string {
	return frontOn(t, "", endpoint, configure)
}

// frontOn is frontOf listening on host ("" for loopback): an address the
// pods of a cluster reach, in e2e tests.
func frontOn(t testing.TB, host, endpoint string, configure func(*httputil.ReverseProxy)) string {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	configure(proxy)
	front := httptest.NewUnstartedServer(proxy)
	if host != "" {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		front.Listener.Close()
		front.Listener = l
	}
	front.Start()
	t.Cleanup(front.Close)
	return front.URL
}

// flipByte inverts the byte at offset at of the body it reads.
type flipByte struct {
	r   io.ReadCloser
	at  int64
	pos int64
}

func (f *flipByte) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if f.at >= f.pos && f.at < f.pos+int64(n) {
		p[f.at-f.pos] ^= 0xff
	}
	f.pos += int64(n)
	return n, err
}

func (f *flipByte) Close() error { return f.r.Close() }

// ReplyLosingFront starts a proxy in front of s that passes every request
// on but, for those lose picks, answers 502 Bad Gateway instead of the
// server's reply, as a connection cut after the request arrived would:
// the server did the work, the client does not know. It returns a
// configuration that reaches s through it and the count of replies lost.
func (s *Server) ReplyLosingFront(t testing.TB, lose func(*http.Request) bool) (s3store.Config, *atomic.Int32) {
	t.Helper()
	var lost atomic.Int32
	cfg := s.front(t, func(proxy *httputil.ReverseProxy) {
		proxy.ModifyResponse = func(r *http.Response) error {
			if lose(r.Request) {
				lost.Add(1)
				return errReplyLost
			}
			return nil
		}
	})
	return cfg, &lost
}

var errReplyLost = errors.New("reply lost")

// HoldingFront is a proxy in front of a server that holds the requests
// it is told to (uploads, say) until Release, as a slow or congested
// endpoint would, and passes the others on at once.
type HoldingFront struct {
	Config s3store.Config // reaches the server through the proxy
	URL    string         // the proxy's endpoint

	released chan struct{}
	once     sync.Once
	held     atomic.Int32
}

// HoldingFront starts a proxy to s for the test's duration that holds the
// requests hold picks.
func (s *Server) HoldingFront(t testing.TB, hold func(*http.Request) bool) *HoldingFront {
	t.Helper()
	f := HoldingFrontOf(t, "", s.Endpoint, hold)
	f.Config = s.Config()
	f.Config.Endpoint = f.URL
	return f
}

// HoldingFrontOf is HoldingFront for a server the test did not start (a
// cluster's), known by its endpoint only: Config is left empty. It
// listens on host ("" for loopback), where the cluster's pods reach it.
func HoldingFrontOf(t testing.TB, host, endpoint string, hold func(*http.Request) bool) *HoldingFront {
	t.Helper()
	f := &HoldingFront{released: make(chan struct{})}
	f.URL = frontOn(t, host, endpoint, func(proxy *httputil.ReverseProxy) {
		direct := proxy.Director
		proxy.Director = func(r *http.Request) {
			if hold(r) {
				f.held.Add(1)
				select {
				case <-f.released:
				case <-r.Context().Done():
				}
			}
			direct(r)
		}
	})
	t.Cleanup(f.Release) // registered last, so run before the proxy's close waits for them
	return f
}

// Held counts the requests held so far.
func (f *HoldingFront) Held() int { return int(f.held.Load()) }

// Release passes held requests on, and every request from now on.
func (f *HoldingFront) Release() { f.once.Do(func() { close(f.released) }) }
