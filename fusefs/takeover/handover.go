package takeover

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// gate holds requests back while the connection is handed over: a
// request that meets a closed gate is never answered by this process, so
// the kernel resends it to the successor.
type gate struct {
	mu       sync.Mutex
	closed   bool
	inflight int
	held     int64         // requests held, never to be answered here
	drained  chan struct{} // closed when closed and inflight reaches 0
}

// op lets a request through the gate, or holds it forever once the gate
// is closed; the returned func ends it.
func (t *FS) op() func() {
	g := &t.gate
	g.mu.Lock()
	if g.closed {
		g.held++
		g.mu.Unlock()
		select {} // the successor answers it, after the kernel resends it
	}
	g.inflight++
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.inflight--
		if g.closed && g.inflight == 0 {
			close(g.drained)
		}
	}
}

// HandOver readies the connection for a successor at a request boundary:
// new requests are held (the successor gets them), those under way end,
// flush uploads everything written, and the journal then says every
// handle is clean, so the successor revives them all. After it returns
// nil, the process must exit without answering anything more.
func (t *FS) HandOver(ctx context.Context, flush func(context.Context) error) error {
	g := &t.gate
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		g.drained = make(chan struct{})
		if g.inflight == 0 {
			close(g.drained)
		}
	}
	drained := g.drained
	g.mu.Unlock()
	select {
	case <-drained:
	case <-ctx.Done():
		return fmt.Errorf("hand over: requests under way did not end: %w", ctx.Err())
	}
	// The answers of those that ended must be written before the process
	// exits: the kernel would resend one still unwritten, and the
	// successor do it again.
	if err := t.answersWritten(ctx); err != nil {
		return err
	}
	// Every request from now on is held before it begins: the successor
	// does them all for the first time, whatever the flush does.
	t.mu.Lock()
	t.handingOver = true
	t.record("h")
	t.mu.Unlock()
	if err := flush(ctx); err != nil {
		return fmt.Errorf("hand over: upload what was written: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for fh, h := range t.handles {
		if h.Dirty && !h.lost && !h.owes { // a loss not yet told stays to tell
			h.Dirty = false
			t.record("c %d", fh)
		}
	}
	return nil
}

// answersWritten waits until the server has written the answer of every
// request it read but those the gate holds.
func (t *FS) answersWritten(ctx context.Context) error {
	srv := t.server.Load()
	if srv == nil {
		return nil
	}
	g := &t.gate
	for {
		g.mu.Lock()
		held := g.held
		g.mu.Unlock()
		if srv.Outstanding() <= held {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hand over: answers not yet written: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}
