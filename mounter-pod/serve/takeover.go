package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"os"
	"path/filepath"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/takeover"
)

// What a mounter keeps in Config.StateDir for a successor: the kernel's
// INIT (sent once per connection) and the reply it got (the terms the
// connection is served on), beside takeover.FS's journal of node ids and
// handles.
const (
	initFile  = "init.json"
	replyFile = "init-reply.json"
)

// connState is a served connection's state directory.
type connState struct{ dir string }

func (s connState) journal() string { return takeover.Path(s.dir) }

// saveInit keeps the kernel's INIT and the reply it got for a successor.
// The reply goes first: INIT says there is a connection to take over.
func (s connState) saveInit(in *fuse.InitIn, reply fuse.InitOut) error {
	if err := s.save(replyFile, reply); err != nil {
		return err
	}
	return s.save(initFile, in)
}

// save writes v to name as JSON, aside and renamed over, so that a death
// midway leaves no half of it.
func (s connState) save(name string, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, name+".new")
	if err := os.WriteFile(tmp, body, 0o600); err != nil {
		return fmt.Errorf("save the kernel's INIT for a successor: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, name)); err != nil {
		return fmt.Errorf("save the kernel's INIT for a successor: %w", err)
	}
	return nil
}

// resume reads what a predecessor left: an error if it left nothing a
// successor can serve its connection with.
func (s connState) resume() (*fusefs.Resume, error) {
	body, err := os.ReadFile(filepath.Join(s.dir, initFile))
	if err != nil {
		return nil, fmt.Errorf("no connection to take over: %w", err)
	}
	var r fusefs.Resume
	if err := json.Unmarshal(body, &r.Init); err != nil {
		return nil, fmt.Errorf("the saved INIT is unreadable: %w", err)
	}
	if !canResend(&r.Init) {
		return nil, errors.New("the kernel cannot resend the requests a dead mounter read (FUSE_NOTIFY_RESEND needs Linux 6.9 or later)")
	}
	if body, err := os.ReadFile(filepath.Join(s.dir, replyFile)); err == nil {
		var reply fuse.InitOut
		if err := json.Unmarshal(body, &reply); err != nil {
			return nil, fmt.Errorf("the saved INIT reply is unreadable: %w", err)
		}
		r.Reply = &reply
	}
	if r.Saved, err = takeover.Load(s.journal()); err != nil {
		return nil, err
	}
	return &r, nil
}

// resumable says whether a predecessor left a connection to take over,
// without reading its journal (a status request asks it).
func (s connState) resumable() bool {
	body, err := os.ReadFile(filepath.Join(s.dir, initFile))
	if err != nil {
		return false
	}
	var in fuse.InitIn
	if json.Unmarshal(body, &in) != nil || !canResend(&in) {
		return false
	}
	_, err = os.Stat(s.journal())
	return err == nil
}

// forget removes the state: the connection is gone (released and
// unmounted, or aborted), and no successor may take it over.
func (s connState) forget() {
	os.Remove(filepath.Join(s.dir, initFile))
	os.Remove(filepath.Join(s.dir, replyFile))
	os.Remove(s.journal())
}

// canResend: requests a dead process read but never answered are lost
// unless the kernel can queue them again for its successor.
func canResend(in *fuse.InitIn) bool {
	return in.Flags64()&fuse.CAP_HAS_RESEND != 0
}

// serveTakeable serves a new connection so that a successor can take it
// over. Called with m.mu held.
func (m *mounter) serveTakeable(fd int) (*fuse.Server, error) {
	if err := os.MkdirAll(m.state.dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory for a successor: %w", err)
	}
	m.state.forget() // a previous connection's, if any: this one is new
	srv, tfs, err := m.fs.ServeTakeover(fdPath(fd), m.cfg.Source(), m.state.journal(), nil)
	if err != nil {
		return nil, err
	}
	m.tfs = tfs
	if err := m.state.saveInit(srv.KernelSettings(), srv.InitReply()); err != nil {
		// Serve anyway: the mount works, only a crash will cost more.
		m.cfg.Logger.Error("a successor will not be able to take this connection over", "err", err)
	}
	return srv, nil
}

// takeOver serves the live connection a predecessor served (see
// fusefs.ServeTakeover). Called with m.mu held.
func (m *mounter) takeOver(fd int) (*fuse.Server, error) {
	r, err := m.state.resume()
	if err != nil {
		return nil, fmt.Errorf("take the connection over: %w", err)
	}
	srv, tfs, err := m.fs.ServeTakeover(fdPath(fd), m.cfg.Source(), m.state.journal(), r)
	if err != nil {
		return nil, fmt.Errorf("take the connection over: %w", err)
	}
	m.tfs = tfs
	m.cfg.Logger.Info("took the FUSE connection over", "nodes", len(r.Saved.Nodes), "handles", len(r.Saved.Handles))
	return srv, nil
}

// mode is how the served mount survives this mounter: taken over when
// this mounter keeps what a successor needs and the kernel can resend
// (Linux 6.9 and later), repaired otherwise.
func (m *mounter) mode() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tfs != nil && m.tfs.Takeable() && m.srv != nil && canResend(m.srv.KernelSettings()) {
		return handoff.ModeTakeover
	}
	return handoff.ModeRepair
}

func fdPath(fd int) string { return fmt.Sprintf("/dev/fd/%d", fd) }

// handOver hands the served connection to a successor (handoff.OpHandOver)
// and exits once the answer is written.
func (m *mounter) handOver() handoff.Reply {
	src := m.cfg.Source()
	m.mu.Lock()
	tfs := m.tfs
	m.mu.Unlock()
	if tfs == nil || !tfs.Takeable() {
		return handoff.Reply{Error: "nothing to hand over: not serving a connection a successor can take over", Source: src}
	}
	if !m.kept.Load() {
		return handoff.Reply{Error: "not handing over: the node plugin keeps no copy of the connection (run with --mount-takeover, or restarted and not yet borrowed one), so it would end with this mounter", Source: src}
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.drainTimeout())
	defer cancel()
	start := time.Now()
	exit := func() {
		writeTerminationLog(fmt.Errorf("handed the FUSE connection over to a successor"))
		os.Exit(handoff.ExitHandedOver)
	}
	if err := tfs.HandOver(ctx, m.current().Flush); err != nil {
		// Requests are held now: exiting is the only way on, and the
		// successor fails what was not uploaded, as after a crash.
		m.cfg.Logger.Error("hand-over incomplete; exiting anyway", "err", err)
		return handoff.Reply{Error: err.Error(), Source: src, Then: exit}
	}
	m.cfg.Logger.Info("handed the FUSE connection over; exiting for the successor", "took", time.Since(start).Round(time.Millisecond))
	return handoff.Reply{OK: true, Source: src, Mode: handoff.ModeTakeover, Then: exit}
}

// armHandOver makes the next SIGTERM a hand-over instead of a drain
// (handoff.Request.AtSignal).
func (m *mounter) armHandOver() handoff.Reply {
	src := m.cfg.Source()
	m.mu.Lock()
	tfs := m.tfs
	m.mu.Unlock()
	if tfs == nil || !tfs.Takeable() {
		return handoff.Reply{Error: "nothing to hand over: not serving a connection a successor can take over", Source: src}
	}
	if !m.kept.Load() {
		return handoff.Reply{Error: "not handing over: the node plugin keeps no copy of the connection (run with --mount-takeover, or restarted and not yet borrowed one), so it would end with this mounter", Source: src}
	}
	m.handOverArmed.Store(true)
	m.cfg.Logger.Info("armed: the next SIGTERM hands the connection over to the container that replaces this one")
	return handoff.Reply{OK: true, Serving: true, Source: src, Mode: handoff.ModeTakeover}
}
