package serve

import (
	"sync"
	"syscall"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
)

// servedHandle is the mounter's own duplicate of the FUSE handle it
// serves, to lend (OpLend) to a node plugin that restarted and so lost
// the duplicate it keeps for a successor mounter. go-fuse owns the handle
// it serves ("/dev/fd/N") and closes it when the connection ends, when N
// may be reused at once: the duplicate is taken before go-fuse has it,
// never from N later.
type servedHandle struct {
	mu sync.Mutex
	fd int // valid when held
	// held is false for the zero value, which holds nothing (0 is a
	// valid descriptor).
	held bool
}

// keep duplicates fd, the handle about to be served, dropping any
// earlier one.
func (h *servedHandle) keep(fd int) error {
	dup, err := handoff.DupHandle(fd)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropLocked()
	h.fd, h.held = dup, true
	return nil
}

// drop closes the duplicate: the connection ended or was not served.
func (h *servedHandle) drop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropLocked()
}

func (h *servedHandle) dropLocked() {
	if h.held {
		syscall.Close(h.fd)
		h.held = false
	}
}

// lend is another duplicate, for the answer to carry, or false when the
// mounter serves nothing.
func (h *servedHandle) lend() (int, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.held {
		return -1, false, nil
	}
	fd, err := handoff.DupHandle(h.fd)
	return fd, err == nil, err
}

// lend answers OpLend: a duplicate of the served handle, attached. A
// handle sent with the request is closed; a mounter that serves nothing
// refuses, for it has nothing a successor could take over.
func (m *mounter) lend(fd int) handoff.Reply {
	src := m.cfg.Source()
	if fd >= 0 {
		syscall.Close(fd)
	}
	if !m.isServing() {
		return handoff.Reply{Error: "lend: not serving a FUSE connection", Source: src}
	}
	dup, ok, err := m.served.lend()
	switch {
	case err != nil:
		return handoff.Reply{Error: "lend: " + err.Error(), Source: src}
	case !ok:
		return handoff.Reply{Error: "lend: the served handle was not kept", Source: src}
	}
	m.kept.Store(true)
	m.cfg.Logger.Info("lent the served FUSE handle to the node plugin", "source", src)
	return handoff.Reply{OK: true, Serving: true, Source: src, Lent: dup}
}
