package driver

import (
	"context"
	"sync"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
)

// A mounter's end is heard at once, not at the next periodic check: the
// node keeps a connection open to the socket of each mounter serving a
// connection the node keeps (handoff.AwaitClose), which only the
// mounter's side closes. When it ends, the reconcile loop checks every
// upgradeCheckEvery until a successor took the connection over
// (nextCheck), and knows the mount hangs from the mounter's socket
// rather than from a probe that would wait probeTimeout
// (successorAwaited). A crash so costs the pods the container's restart,
// not up to a check interval and a probe timeout more.

// mounterWatches are the watches under way and the ends they heard.
type mounterWatches struct {
	mu sync.Mutex
	// ctx is the reconcile loop's: watches end with it; none start
	// before it runs (start).
	ctx      context.Context
	watching map[string]bool // volume id → a watch runs
	// ended carries the volume ids whose mounter ended to the reconcile
	// loop; when full, an end is dropped, for the periodic check to find.
	ended chan string
}

func newMounterWatches() *mounterWatches {
	return &mounterWatches{watching: map[string]bool{}, ended: make(chan string, 64)}
}

// start lets watches run until ctx ends.
func (w *mounterWatches) start(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ctx = ctx
}

// watchMounter watches the mounter at socket, serving volumeID, unless a
// watch of the volume runs or the node keeps no connection of it.
func (n *nodeServer) watchMounter(volumeID, socket string) {
	if _, kept := n.keeper.connection(volumeID); !kept {
		return
	}
	w := n.watches
	w.mu.Lock()
	defer w.mu.Unlock()
	ctx := w.ctx
	if ctx == nil || w.watching[volumeID] {
		return
	}
	w.watching[volumeID] = true
	go func() {
		defer func() {
			w.mu.Lock()
			delete(w.watching, volumeID)
			w.mu.Unlock()
		}()
		for handoff.AwaitClose(ctx, socket) {
			// Closed at its deadline, or at its end: connecting again
			// tells.
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case w.ended <- volumeID:
		default:
		}
	}()
}

// successorAwaited says, from its mounter's socket, whether a kept
// connection hangs for want of a server: nothing listens (the mounter
// ended) or a restarted mounter waits to resume it.
func successorAwaited(status func() (handoff.Reply, error)) bool {
	rep, err := status()
	if err != nil {
		return mounterGone(err)
	}
	return rep.Resumable && !rep.Serving
}
