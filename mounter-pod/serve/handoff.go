package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/takeover"
	"github.com/objfuse/objfuse/mounter-pod/handoff"
)

// TerminationLog is where Kubernetes reads a container's last words; the
// reason a mounter stops goes there so that kubectl describe shows it.
const TerminationLog = "/dev/termination-log"

// Handoff is the mounter pod's main loop: check the bucket, listen on
// socket, serve the FUSE handle the node plugin sends, and exit when told
// to (after NodeUnstage) or when the connection ends. SIGTERM (the pod
// deleted or evicted) keeps serving, as a user pod may still write and
// exiting would break its mount, but stops acknowledging what could be
// lost: closes wait for their upload from then on, and uploads still
// running at cfg.DrainTimeout are reported lost (fusefs.FS.StopBy), for
// the node plugin to tell the pods before the kubelet's SIGKILL. Released
// after a signal, or with cfg.ExitWhenReleased, the mounter exits.
func Handoff(ctx context.Context, cfg Config, socket string) error {
	f, err := cfg.Open(ctx)
	if err != nil {
		writeTerminationLog(err)
		return err
	}
	l, err := handoff.Listen(socket)
	if err != nil {
		writeTerminationLog(err)
		return err
	}
	// done exists from the start: the loop below selects on it before
	// anything is served, and a nil channel there would never fire.
	m := &mounter{cfg: cfg, fs: f, done: make(chan struct{}), state: connState{cfg.StateDir()}}
	defer func() { m.current().Close() }()
	if cfg.MetricsAddr != "" {
		stop, err := serveMetrics(cfg.MetricsAddr, m.current, cfg.Source())
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		defer stop()
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go handoff.Serve(sctx, l, m.handle)
	cfg.Logger.Info("waiting for a FUSE handle", "socket", socket, "source", cfg.Source())

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var stopping bool
	for {
		select {
		case <-m.ended():
			if (stopping || cfg.ExitWhenReleased) && m.wasReleased() {
				cfg.Logger.Info("released; exiting", "signalled", stopping)
				return nil
			}
			if m.wasReleased() {
				// NodeUnstage: uploaded, then unmounted. Wait for the
				// next NodeStage on this node, with a fresh filesystem
				// (and read cache).
				m.state.forget()
				m.current().Close()
				f, err := cfg.Open(ctx)
				if err != nil {
					writeTerminationLog(err)
					return err
				}
				m.reset(f)
				cfg.Logger.Info("released; waiting for a new FUSE handle")
				continue
			}
			// Not released: the mount was aborted or torn down under us.
			// Exit non-zero so that the pod restarts the mounter and the
			// node plugin can mount the volume again; the connection is
			// gone, and with it what a successor would take over.
			m.state.forget()
			cfg.Logger.Warn("FUSE connection ended without being released; exiting to be restarted")
			err := fmt.Errorf("FUSE connection ended without being released")
			if ferr := m.flush(); ferr != nil {
				err = fmt.Errorf("%w; pending writes: %v", err, ferr)
			}
			writeTerminationLog(err)
			return err
		case sig := <-sigs:
			if !m.isServing() {
				cfg.Logger.Info("signal while not serving; exiting", "signal", sig.String())
				return nil
			}
			if m.handOverArmed.Load() {
				cfg.Logger.Info("signal with a hand-over armed: handing the connection over", "signal", sig.String())
				if rep := m.handOver(); rep.Then != nil {
					rep.Then()
				}
			}
			if stopping {
				continue
			}
			stopping = true
			deadline := time.Now().Add(cfg.drainTimeout())
			m.current().StopBy(deadline)
			cfg.Logger.Info("signal; closes wait for their upload from now on, pending uploads have until the deadline; serving until released",
				"signal", sig.String(), "deadline", deadline.Format(time.RFC3339))
			lost, latest, err := m.lostDuring(func() error { return m.flushBy(deadline) })
			if err != nil {
				cfg.Logger.Error("flush on signal", "err", err)
			}
			if lost > 0 {
				cfg.Logger.Error("uploads not finished by the drain deadline; their files are not in S3", "files", lost, "latest", latest)
			}
		case <-ctx.Done():
			return m.flush()
		}
	}
}

type mounter struct {
	cfg Config

	// state is where the served connection's state is kept for a
	// successor (with cfg.Takeover).
	state connState

	mu  sync.Mutex
	fs  *fusefs.FS
	srv *fuse.Server
	tfs *takeover.FS // nil without cfg.Takeover
	// handOverArmed: hand over at the next signal (OpHandOver AtSignal).
	handOverArmed atomic.Bool
	// kept: the node plugin keeps a duplicate of the served handle
	// (Request.Kept, or it borrowed one: OpLend).
	kept     atomic.Bool
	done     chan struct{}
	released bool
	served   servedHandle // for OpLend (lend.go)
}

func (m *mounter) wasReleased() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.released
}

// reset readies the mounter for a new handle after a released connection.
func (m *mounter) reset(f *fusefs.FS) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tfs != nil {
		m.tfs.Close()
	}
	m.fs, m.srv, m.tfs, m.done, m.released = f, nil, nil, make(chan struct{}), false
}

// current is the filesystem being served, or to be served next.
func (m *mounter) current() *fusefs.FS {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fs
}

func (m *mounter) isServing() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.srv != nil
}

// ended is closed when the served connection ends.
func (m *mounter) ended() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.done
}

// flush uploads what is pending, by the stop deadline once there is one.
func (m *mounter) flush() error {
	deadline := time.Now().Add(DefaultDrainTimeout)
	if stop, stopping := m.current().StopDeadline(); stopping && stop.After(time.Now()) {
		deadline = stop
	}
	return m.flushBy(deadline)
}

// lostDuring runs flush and counts the uploads after asynchronous closes
// found lost meanwhile, naming the latest. A flush takes each file's
// lock, which an upload holds, so those cut or failed during it are
// counted when it returns.
func (m *mounter) lostDuring(flush func() error) (lost int64, latest string, err error) {
	before := m.current().Health().LostUploads
	err = flush()
	h := m.current().Health()
	return h.LostUploads - before, h.LastLostUpload, err
}

func (m *mounter) flushBy(deadline time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return m.current().Flush(ctx)
}

func (m *mounter) handle(req handoff.Request, fd int) handoff.Reply {
	src := m.cfg.Source()
	switch req.Op {
	case handoff.OpStatus:
		if fd >= 0 {
			syscall.Close(fd)
		}
		_, stopping := m.current().StopDeadline()
		rep := handoff.Reply{OK: true, Serving: m.isServing(), Source: src, Health: wireHealth(m.current().Health()), Stopping: stopping, Mode: m.mode()}
		rep.Resumable = !rep.Serving && m.cfg.Takeover && m.state.resumable()
		return rep
	case handoff.OpExit:
		if fd >= 0 {
			syscall.Close(fd)
		}
		// Upload first; stay serving while anything is pending: the node
		// plugin retries NodeUnstage, and letting go now would lose it.
		lost, latest, err := m.lostDuring(m.flush)
		if err != nil {
			return handoff.Reply{Error: "pending writes could not be uploaded: " + err.Error(), Source: src}
		}
		// Uploads after asynchronous closes that failed meanwhile are
		// told once, here: after NodeUnstage no one would ask.
		if lost > 0 {
			return handoff.Reply{Error: fmt.Sprintf("%d file(s) closed asynchronously could not be uploaded and are not in S3 (the latest: %s)", lost, latest), Source: src}
		}
		m.mu.Lock()
		m.released = m.srv != nil
		m.mu.Unlock()
		return handoff.Reply{OK: true, Serving: m.isServing(), Source: src}
	case handoff.OpServe:
		if fd < 0 {
			return handoff.Reply{Error: "serve needs a FUSE handle attached", Source: src}
		}
		if err := m.serve(fd, req.MountGroup, req.TakeOver); err != nil {
			syscall.Close(fd)
			return handoff.Reply{Error: err.Error(), Source: src}
		}
		m.kept.Store(req.Kept)
		return handoff.Reply{OK: true, Serving: true, Source: src, Mode: m.mode()}
	case handoff.OpLend:
		return m.lend(fd)
	case handoff.OpResize:
		if fd >= 0 {
			syscall.Close(fd)
		}
		if req.CapacityBytes <= 0 {
			return handoff.Reply{Error: fmt.Sprintf("resize needs a size above zero, not %d", req.CapacityBytes), Source: src}
		}
		// A mount without a quota (enforceCapacity "false", a static
		// volume without capacityBytes) has nothing to change.
		m.current().SetCapacity(req.CapacityBytes)
		return handoff.Reply{OK: true, Serving: m.isServing(), Source: src}
	case handoff.OpHandOver:
		if fd >= 0 {
			syscall.Close(fd)
		}
		if req.AtSignal {
			return m.armHandOver()
		}
		return m.handOver()
	default:
		if fd >= 0 {
			syscall.Close(fd)
		}
		return handoff.Reply{Error: fmt.Sprintf("unknown op %q", req.Op), Source: src}
	}
}

func (m *mounter) serve(fd int, mountGroup *uint32, takeOver bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.srv != nil {
		return fmt.Errorf("already serving a FUSE connection")
	}
	if takeOver && !m.cfg.Takeover {
		return fmt.Errorf("this mounter runs without --takeover: it cannot take a connection over")
	}
	if mountGroup != nil {
		m.fs.SetMountGroup(*mountGroup)
	}
	if err := m.served.keep(fd); err != nil { // before go-fuse owns fd
		return fmt.Errorf("keep a duplicate of the FUSE handle: %w", err)
	}
	var (
		srv *fuse.Server
		err error
	)
	switch {
	case takeOver:
		srv, err = m.takeOver(fd)
	case m.cfg.Takeover:
		srv, err = m.serveTakeable(fd)
	default:
		if srv, err = m.fs.Mount(fmt.Sprintf("/dev/fd/%d", fd), m.cfg.Source(), false); err == nil {
			err = srv.WaitMount()
		}
	}
	if err != nil {
		m.served.drop()
		return fmt.Errorf("serve FUSE handle: %w", err)
	}
	done := m.done
	go func() { srv.Wait(); m.served.drop(); close(done) }()
	m.srv = srv
	m.cfg.Logger.Info("serving", "source", m.cfg.Source())
	return nil
}

func writeTerminationLog(err error) {
	if f, ferr := os.OpenFile(TerminationLog, os.O_WRONLY|os.O_TRUNC, 0); ferr == nil {
		fmt.Fprintln(f, err)
		f.Close()
	}
}

// wireHealth is h for a status answer; nil when nothing is wrong.
func wireHealth(h fusefs.Health) *handoff.Health {
	if h.Problem == nil && h.LostUploads == 0 && h.Conflicts == 0 && h.PendingUploads == 0 {
		return nil
	}
	w := &handoff.Health{LostUploads: h.LostUploads, LastLostUpload: h.LastLostUpload, LostFiles: h.LostFiles,
		PendingUploads: h.PendingUploads, PendingBytes: h.PendingBytes, PendingFiles: h.PendingFiles,
		Conflicts: h.Conflicts, LastConflict: h.LastConflict}
	if h.Problem != nil {
		w.Problem, w.ProblemKind, w.ProblemSince = h.Problem.Error(), problemKind(h.Problem), h.ProblemSince
	}
	return w
}

// problemKind is the handoff.Problem* kind of a fusefs.Health problem,
// "" for none.
func problemKind(problem error) string {
	switch {
	case problem == nil:
		return ""
	case errors.Is(problem, store.ErrAccess):
		return handoff.ProblemAccess
	case errors.Is(problem, store.ErrNoBucket):
		return handoff.ProblemBucket
	default:
		return handoff.ProblemUnavailable
	}
}
