// Package processlauncher runs mounters as processes on this machine, for
// tests: a lifecycle.Launcher without a cluster.
package processlauncher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// Process runs each mounter as a supervised objfuse-mount process on this
// machine, laid out as kubelet lays out a pod, and restarted when it
// crashes as restartPolicy OnFailure would. It stands in for Kube where
// there is no cluster: csi-sanity and the driver's tests.
type Process struct {
	Binary     string // objfuse-mount
	KubeletDir string // where "pods/<uid>/volumes/..." go
	StateDir   string // credentials and staging directories
	NodeID     string // the one node this machine is
	// Credential, when set, runs mounters as that (unprivileged) user.
	Credential   *syscall.Credential
	ReadyTimeout time.Duration
	Logger       *slog.Logger

	mu    sync.Mutex
	procs map[string]*proc
}

var _ lifecycle.Launcher = (*Process)(nil)

type proc struct {
	uid      string
	readOnly bool
	stop     chan struct{}
	done     chan struct{}

	mu     sync.Mutex
	cmd    *exec.Cmd
	stderr *tail
	exited chan struct{} // closed when the current process exits
	err    error         // the last exit's error
}

func (p *Process) NodeExists(_ context.Context, nodeID string) (bool, error) {
	return nodeID == p.NodeID, nil
}

// Run has nothing to do: each mounter's supervisor restarts it, and
// there is no cluster to keep in step with.
func (p *Process) Run(ctx context.Context) { <-ctx.Done() }

// Describe and Collect: a process launcher counts nothing.
func (p *Process) Describe(chan<- *prometheus.Desc) {}
func (p *Process) Collect(chan<- prometheus.Metric) {}

// PID is the process id serving m now, or 0: for tests that kill mounters.
func (p *Process) PID(m spec.Mounter) int {
	p.mu.Lock()
	pr := p.procs[m.Key()]
	p.mu.Unlock()
	if pr == nil {
		return 0
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.cmd == nil || pr.cmd.Process == nil {
		return 0
	}
	return pr.cmd.Process.Pid
}

func (p *Process) Launch(ctx context.Context, m spec.Mounter, creds map[string][]byte) (string, error) {
	p.mu.Lock()
	if p.procs == nil {
		p.procs = map[string]*proc{}
	}
	pr := p.procs[m.Key()]
	if pr == nil {
		var err error
		if pr, err = p.start(m, creds); err != nil {
			p.mu.Unlock()
			return "", err
		}
		p.procs[m.Key()] = pr
	} else if pr.readOnly != m.ReadOnly {
		p.mu.Unlock()
		return "", fmt.Errorf("%w: running read-only=%t", lifecycle.ErrIncompatible, pr.readOnly)
	}
	p.mu.Unlock()

	timeout := p.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	socket, _ := spec.SocketOnNode(p.KubeletDir, pr.uid)
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := handoff.Probe(pctx, socket)
		cancel()
		if err == nil {
			return pr.uid, nil
		}
		pr.mu.Lock()
		exited, exitErr, last := pr.exited, pr.err, pr.stderr.last()
		pr.mu.Unlock()
		select {
		case <-exited:
			// A mounter that cannot start says why on stderr, as a pod's
			// termination message would.
			p.Stop(context.Background(), m)
			return "", fmt.Errorf("%w: %s (%v)", lifecycle.ErrFailed, last, exitErr)
		default:
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%w after %s: %v", lifecycle.ErrNotReady, timeout, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// start prepares m's directories and supervises its process.
func (p *Process) start(m spec.Mounter, creds map[string][]byte) (*proc, error) {
	uid := fakeUID(m.Key())
	socket, _ := spec.SocketOnNode(p.KubeletDir, uid)
	dir := filepath.Join(p.StateDir, "mounters", m.Key())
	credDir, staging := filepath.Join(dir, "credentials"), filepath.Join(dir, "staging")
	for _, d := range []string{filepath.Dir(socket), credDir, staging} {
		// Parents stay root's but traversable, as kubelet's pod
		// directories are; the leaf is the mounter's own.
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			return nil, fmt.Errorf("mounter %s: %w", m.Key(), err)
		}
		if err := os.Mkdir(d, 0o700); err != nil && !os.IsExist(err) {
			return nil, fmt.Errorf("mounter %s: %w", m.Key(), err)
		}
		if err := p.chown(d); err != nil {
			return nil, err
		}
	}
	for name, data := range creds {
		f := filepath.Join(credDir, filepath.Base(name))
		if err := os.WriteFile(f, data, 0o400); err != nil {
			return nil, fmt.Errorf("mounter %s: credentials: %w", m.Key(), err)
		}
		if err := p.chown(f); err != nil {
			return nil, err
		}
	}
	pr := &proc{uid: uid, readOnly: m.ReadOnly, stop: make(chan struct{}), done: make(chan struct{}), stderr: &tail{}}
	// Stop gives a mounter 10 s after SIGTERM: time to report what it
	// could not upload before the kill.
	args := spec.BeforeSource(m.Args(socket, credDir, staging), "--drain-timeout=5s")
	if err := pr.run(p, args); err != nil {
		return nil, err
	}
	go p.supervise(m, pr, args)
	return pr, nil
}

func (p *Process) chown(path string) error {
	if p.Credential == nil {
		return nil
	}
	if err := os.Chown(path, int(p.Credential.Uid), int(p.Credential.Gid)); err != nil {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	return nil
}

func (pr *proc) run(p *Process, args []string) error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.runLocked(p, args)
}

// runLocked starts the mounter process; pr.mu is held, so Stop sees
// either no process yet or this one.
func (pr *proc) runLocked(p *Process, args []string) error {
	cmd := exec.Command(p.Binary, args...)
	cmd.Stderr = pr.stderr
	cmd.Env = []string{"PATH=/usr/bin:/bin"} // no credentials inherited from the environment
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.Credential}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mounter: %w", err)
	}
	exited := make(chan struct{})
	pr.cmd, pr.exited = cmd, exited
	go func() {
		err := cmd.Wait()
		pr.mu.Lock()
		pr.err = err
		pr.mu.Unlock()
		close(exited)
	}()
	return nil
}

// supervise restarts a crashed mounter, as kubelet restarts a pod's
// container; a clean exit (told to exit) ends it.
func (p *Process) supervise(m spec.Mounter, pr *proc, args []string) {
	defer close(pr.done)
	for {
		pr.mu.Lock()
		exited := pr.exited
		pr.mu.Unlock()
		select {
		case <-pr.stop:
			return
		case <-exited:
		}
		pr.mu.Lock()
		err := pr.err
		pr.mu.Unlock()
		if err == nil {
			return
		}
		p.Logger.Warn("mounter exited; restarting", "mounter", m.Key(), "err", err, "last", pr.stderr.last())
		select {
		case <-pr.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		pr.mu.Lock()
		select {
		case <-pr.stop:
			pr.mu.Unlock()
			return
		default:
		}
		err = pr.runLocked(p, args)
		pr.mu.Unlock()
		if err != nil {
			p.Logger.Error("restart mounter", "mounter", m.Key(), "err", err)
			return
		}
	}
}

func (p *Process) Stop(ctx context.Context, m spec.Mounter) error {
	p.mu.Lock()
	pr := p.procs[m.Key()]
	delete(p.procs, m.Key())
	p.mu.Unlock()
	if pr != nil {
		pr.mu.Lock()
		close(pr.stop)
		cmd, exited := pr.cmd, pr.exited
		pr.mu.Unlock()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		<-pr.done
	}
	uid := fakeUID(m.Key())
	os.RemoveAll(filepath.Join(p.KubeletDir, "pods", uid))
	return os.RemoveAll(filepath.Join(p.StateDir, "mounters", m.Key()))
}

// Close stops every mounter.
func (p *Process) Close() {
	for _, pr := range p.snapshot() {
		pr.mu.Lock()
		close(pr.stop)
		cmd, exited := pr.cmd, pr.exited
		pr.mu.Unlock()
		cmd.Process.Kill()
		<-exited
		<-pr.done
	}
}

func (p *Process) snapshot() map[string]*proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.procs
	p.procs = nil
	return out
}

// fakeUID is a stable UID-shaped name for m's stand-in pod.
func fakeUID(key string) string {
	s := sha256.Sum256([]byte(key))
	h := fmt.Sprintf("%x", s[:16])
	return strings.Join([]string{h[0:8], h[8:12], h[12:16], h[16:20], h[20:32]}, "-")
}

// tail keeps the last lines a mounter wrote to stderr.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > 16<<10 {
		t.buf = t.buf[len(t.buf)-8<<10:]
	}
	os.Stderr.Write(b)
	return len(b), nil
}

func (t *tail) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := bytes.Split(bytes.TrimSpace(t.buf), []byte("\n"))
	return strings.TrimPrefix(string(lines[len(lines)-1]), "objfuse-mount: ")
}
