package s3store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs/store"
)

// rawGetTransport sends ranged GETs on plain-HTTP endpoints itself, over
// connections it keeps, so that a response body can be spliced from the
// socket into a pipe (and from there into /dev/fuse) without passing
// through user space: Go's http.Transport hides its sockets. Everything
// else, and every GET it cannot handle (TLS, proxies), goes to inner.
// minio-go still builds, signs and retries every request; only the wire
// exchange of the GET is ours.
type rawGetTransport struct {
	inner *http.Transport // also dials our connections

	mu   sync.Mutex
	idle map[string][]*rawConn // by host:port, most recently used last
}

// maxIdleRaw bounds the idle connections kept per host; rawIdleTimeout
// is how long one is kept. Servers close idle connections after a while
// (often 5 to 60 s) without telling: a kept connection is also checked
// before use, and a request that fails on one goes again on another.
const (
	maxIdleRaw     = 32
	rawIdleTimeout = 20 * time.Second
)

func newRawGetTransport(inner *http.Transport) *rawGetTransport {
	return &rawGetTransport{inner: inner, idle: map[string][]*rawConn{}}
}

func (t *rawGetTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.handles(req) {
		return t.inner.RoundTrip(req)
	}
	return t.roundTripRaw(req)
}

// CloseIdleConnections lets minio-go and tests drop idle connections.
func (t *rawGetTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*rawConn{}
	t.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.conn.Close()
		}
	}
	t.inner.CloseIdleConnections()
}

func (t *rawGetTransport) handles(req *http.Request) bool {
	if req.Method != http.MethodGet || req.URL.Scheme != "http" || req.Header.Get("Range") == "" || req.Body != nil && req.Body != http.NoBody {
		return false
	}
	if t.inner.Proxy != nil {
		if u, err := t.inner.Proxy(req); err != nil || u != nil {
			return false
		}
	}
	return true
}

type rawConn struct {
	conn *net.TCPConn
	raw  syscall.RawConn
	br   *bufio.Reader // reads the response headers, through headerBudget
	// headerBudget bounds what a response header may take, as
	// http.Transport's MaxResponseHeaderBytes does.
	headerBudget int
	idleSince    time.Time
}

// open reports whether an idle connection is still open: nothing to
// read yet. A server that closed it has sent EOF; one that sent bytes
// unasked broke HTTP.
func (c *rawConn) open() bool {
	open := false
	c.raw.Control(func(fd uintptr) {
		var b [1]byte
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		open = err == unix.EAGAIN
	})
	return open
}

// maxResponseHeader is http.Transport's default MaxResponseHeaderBytes.
const maxResponseHeader = 10 << 20

var errHeaderTooLarge = errors.New("response header too large")

// Read feeds br while a response header is read.
func (c *rawConn) Read(p []byte) (int, error) {
	if c.headerBudget <= 0 {
		return 0, errHeaderTooLarge
	}
	n, err := c.conn.Read(p[:min(len(p), c.headerBudget)])
	c.headerBudget -= n
	return n, err
}

func (t *rawGetTransport) roundTripRaw(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	host := canonicalHost(req.URL)
	for {
		c, reused, err := t.get(ctx, host)
		if err != nil {
			return nil, err
		}
		resp, err := t.exchange(ctx, c, host, req)
		if err != nil {
			c.conn.Close()
			// A kept connection the server closed after the check fails
			// on first use; that is not the request's failure (a GET can
			// go again). A new connection's failure is.
			if reused && ctx.Err() == nil {
				continue
			}
			return nil, err
		}
		return resp, nil
	}
}

func canonicalHost(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

func (t *rawGetTransport) get(ctx context.Context, host string) (*rawConn, bool, error) {
	for {
		t.mu.Lock()
		cs := t.idle[host]
		if len(cs) == 0 {
			t.mu.Unlock()
			break
		}
		c := cs[len(cs)-1]
		t.idle[host] = cs[:len(cs)-1]
		t.mu.Unlock()
		if time.Since(c.idleSince) < rawIdleTimeout && c.open() {
			return c, true, nil
		}
		c.conn.Close()
	}
	nc, err := t.inner.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return nil, false, fmt.Errorf("dial %s: not a TCP connection", host)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		tc.Close()
		return nil, false, err
	}
	c := &rawConn{conn: tc, raw: raw}
	c.br = bufio.NewReaderSize(c, 4096)
	return c, false, nil
}

func (t *rawGetTransport) put(host string, c *rawConn) {
	c.idleSince = time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.idle[host]) >= maxIdleRaw {
		c.conn.Close()
		return
	}
	t.idle[host] = append(t.idle[host], c)
}

// exchange writes req on c and reads the response header. A 2xx response
// with a Content-Length gets a rawBody that can splice; anything else
// keeps net/http's body reader and the connection is not reused.
func (t *rawGetTransport) exchange(ctx context.Context, c *rawConn, host string, req *http.Request) (*http.Response, error) {
	// Cancelling ctx fails the connection's reads and writes from now
	// until the body is closed: a deadline in the past.
	// The header is waited for as long as the inner transport would.
	c.conn.SetDeadline(time.Now().Add(t.inner.ResponseHeaderTimeout))
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	if err := req.Write(c.conn); err != nil {
		stop()
		return nil, ctxErr(ctx, err)
	}
	c.headerBudget = maxResponseHeader
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		stop()
		return nil, ctxErr(ctx, err)
	}
	// A body net/http frames is read through br too: the budget was the
	// header's, not the body's (versitygw's 12 MiB answers failed here).
	c.headerBudget = math.MaxInt
	c.conn.SetDeadline(time.Time{})
	if ctx.Err() != nil {
		// Cancelled while the header came: the line above may have
		// undone the cancellation's deadline.
		stop()
		resp.Body.Close()
		return nil, ctx.Err()
	}
	if resp.StatusCode/100 == 2 {
		if err := checkRange(req, resp); err != nil {
			stop()
			resp.Body.Close()
			return nil, err
		}
	}
	if resp.StatusCode/100 != 2 || resp.ContentLength < 0 || len(resp.TransferEncoding) > 0 {
		// net/http's reader parses whatever framing this is; the
		// connection closes with the body.
		resp.Body = &closingBody{ReadCloser: resp.Body, conn: c.conn, stop: stop}
		return resp, nil
	}
	// Body bytes already buffered behind the header are handed out
	// first; the rest come straight from the socket.
	buffered, _ := c.br.Peek(c.br.Buffered())
	lead := append([]byte(nil), buffered...)
	c.br.Discard(len(lead))
	if int64(len(lead)) > resp.ContentLength {
		stop()
		return nil, fmt.Errorf("GET %s: server sent more than its Content-Length", req.URL.Path)
	}
	// A server that closes after every answer (versitygw: "Connection:
	// close") still sends the body as Content-Length says: it splices,
	// and the connection is not kept.
	resp.Body = &rawBody{t: t, host: host, c: c, lead: lead, left: resp.ContentLength - int64(len(lead)), ctx: ctx, stop: stop, closing: resp.Close}
	return resp, nil
}

// checkRange refuses a response to a ranged GET that does not start where
// the range does (see rangeStartsAt).
func checkRange(req *http.Request, resp *http.Response) error {
	var start int64
	if _, err := fmt.Sscanf(req.Header.Get("Range"), "bytes=%d-", &start); err != nil {
		return nil // not a range we sent
	}
	cr := resp.Header.Get("Content-Range")
	if resp.StatusCode == http.StatusOK {
		cr = "" // the whole object, whatever the header says
	}
	if err := rangeStartsAt(start, cr); err != nil {
		return fmt.Errorf("GET %s: asked for %s, the server answered %s: %w", req.URL.Path, req.Header.Get("Range"), resp.Status, err)
	}
	return nil
}

// rangeStartsAt refuses the answer to a ranged GET from off whose
// Content-Range (empty: the whole object, a 200) does not start there: a
// server or proxy that ignored the Range header would otherwise hand out
// the object's first bytes as the range's.
func rangeStartsAt(off int64, contentRange string) error {
	if contentRange == "" && off == 0 || strings.HasPrefix(contentRange, fmt.Sprintf("bytes %d-", off)) {
		return nil
	}
	if contentRange == "" {
		return fmt.Errorf("the whole object came back for a range from byte %d (the Range header was ignored)", off)
	}
	return fmt.Errorf("the range came back as %q, not from byte %d", contentRange, off)
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

type closingBody struct {
	io.ReadCloser
	conn net.Conn
	stop func() bool
}

func (b *closingBody) Close() error {
	b.stop()
	err := b.ReadCloser.Close()
	b.conn.Close()
	return err
}

// rawBody is a response body of known length on a connection of ours.
// Read copies like any body; SpliceTo moves bytes from the socket into a
// pipe without copying them through user space.
type rawBody struct {
	t    *rawGetTransport
	host string
	c    *rawConn
	lead []byte // body bytes read along with the header
	left int64  // bytes still on the socket
	err  error
	ctx  context.Context
	stop func() bool
	done bool
	// closing: the server closes the connection after this response.
	closing bool
}

func (b *rawBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(b.lead) > 0 {
		n := copy(p, b.lead)
		b.lead = b.lead[n:]
		return n, nil
	}
	if b.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.c.conn.Read(p)
	b.left -= int64(n)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		b.err = ctxErr(b.ctx, err)
		return n, b.err
	}
	return n, nil
}

var _ store.PipeSource = (*rawBody)(nil)

// SpliceTo is store.PipeSource's: a full pipe blocks the call if pipeFd
// is blocking.
func (b *rawBody) SpliceTo(pipeFd int, max int) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(b.lead) > 0 {
		n, err := unix.Write(pipeFd, b.lead[:min(len(b.lead), max)])
		if err != nil {
			b.err = fmt.Errorf("write to pipe: %w", err)
			return 0, b.err
		}
		b.lead = b.lead[n:]
		return n, nil
	}
	if b.left == 0 {
		return 0, io.EOF
	}
	want := int(min(int64(max), b.left))
	var n int64
	var serr error
	err := b.c.raw.Read(func(fd uintptr) bool {
		n, serr = unix.Splice(int(fd), nil, pipeFd, nil, want, 0)
		return serr != unix.EAGAIN
	})
	if err == nil {
		err = serr
	}
	if err == nil && n == 0 {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.err = ctxErr(b.ctx, fmt.Errorf("splice from socket: %w", err))
		return 0, b.err
	}
	b.left -= n
	return int(n), nil
}

// Close returns the connection for reuse when the body was read to its
// end, and closes it otherwise.
func (b *rawBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	stopped := b.stop()
	if b.err == nil && b.left == 0 && len(b.lead) == 0 && stopped && !b.closing {
		b.t.put(b.host, b.c)
		return nil
	}
	return b.c.conn.Close()
}
