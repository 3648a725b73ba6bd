package driver

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	dto "github.com/prometheus/client_model/go"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// fakeMounter answers on a real Unix socket as a mounter process would,
// in the state the test gives it, and keeps the handle it is served.
type fakeMounter struct {
	socket string
	l      *net.UnixListener
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	serving   bool
	resumable bool
	mode      string
	// refuseTakeOver makes OpServe with TakeOver fail.
	refuseTakeOver bool
	// lendOther, when set, is lent instead of the served handle.
	lendOther int
	served    int // the handle it serves, -1 for none
	requests  []handoff.Request
}

// startMounter starts a mounter at socket: a restarted one, serving
// nothing, resumable or not.
func startMounter(t *testing.T, socket string, resumable bool, mode string) *fakeMounter {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := handoff.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &fakeMounter{socket: socket, l: l, cancel: cancel, done: make(chan struct{}), resumable: resumable, mode: mode, served: -1}
	go func() { handoff.Serve(ctx, l, m.handle); close(m.done) }()
	t.Cleanup(m.die)
	return m
}

// die stops the mounter as a crash would: its socket file stays, and
// nothing listens (ECONNREFUSED); the handle it served is closed.
func (m *fakeMounter) die() {
	m.cancel()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.served >= 0 {
		syscall.Close(m.served)
		m.served = -1
	}
}

func (m *fakeMounter) handle(req handoff.Request, fd int) handoff.Reply {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests = append(m.requests, req)
	src := "objfuse:bucket-1/"
	switch {
	case req.Op == handoff.OpServe && req.TakeOver && m.refuseTakeOver:
		syscall.Close(fd)
		return handoff.Reply{Error: "the saved state does not match", Source: src}
	case req.Op == handoff.OpServe:
		m.served, m.serving = fd, true
		return handoff.Reply{OK: true, Serving: true, Source: src}
	case fd >= 0:
		syscall.Close(fd)
	}
	switch req.Op {
	case handoff.OpLend:
		from := m.served
		if m.lendOther > 0 {
			from = m.lendOther
		}
		dup, err := handoff.DupHandle(from)
		if err != nil || !m.serving {
			return handoff.Reply{Error: "not serving", Source: src}
		}
		return handoff.Reply{OK: true, Serving: true, Source: src, Lent: dup}
	case handoff.OpExit:
		m.serving = false
		syscall.Close(m.served)
		m.served = -1
	}
	return handoff.Reply{OK: true, Serving: m.serving, Resumable: m.resumable && !m.serving, Mode: m.mode, Source: src}
}

// set changes the mounter's state under its lock.
func (m *fakeMounter) set(change func(*fakeMounter)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	change(m)
}

// takeOvers are the OpServe requests with TakeOver the mounter got.
func (m *fakeMounter) takeOvers() []handoff.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(m.requests), func(r handoff.Request) bool { return r.Op != handoff.OpServe || !r.TakeOver })
}

func (m *fakeMounter) asked(op string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.requests {
		if r.Op == op {
			n++
		}
	}
	return n
}

// servedName is what /proc names the handle the mounter serves.
func (m *fakeMounter) servedName(t *testing.T) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fdName(t, m.served)
}

func fdName(t *testing.T, fd int) string {
	t.Helper()
	name, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// handlesOn counts this process's descriptors open on the file /proc
// names name.
func handlesOn(t *testing.T, name string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == name {
			n++
		}
	}
	return n
}

const mounterUID = "01234567-89ab-cdef-0123-456789abcdef"

// takeoverEnv is a node plugin (fake mounts, real sockets and handles)
// with volume "vol" staged at staging and published at target, served
// by a fake mounter.
type takeoverEnv struct {
	t               *testing.T
	opts            Options
	d               *Driver
	fake            *mounts.Fake
	events          *toldEvents
	staging, target string
	socket          string
	mounter         *fakeMounter
}

var group = uint32(2000)

func newTakeoverEnv(t *testing.T, takeover bool) *takeoverEnv {
	t.Helper()
	dir := t.TempDir()
	e := &takeoverEnv{t: t, fake: &mounts.Fake{}, events: &toldEvents{}, staging: filepath.Join(dir, "staging"), target: filepath.Join(dir, "pods", "a", "mount")}
	e.opts = Options{Mode: ModeNode, NodeID: "n", KubeletDir: filepath.Join(dir, "kubelet"), StateDir: filepath.Join(dir, "state"),
		Events: e.events, Mounts: e.fake, MountTakeover: takeover, MounterWait: 5 * time.Second}
	e.restartNode()
	e.socket, _ = spec.SocketOnNode(e.opts.KubeletDir, mounterUID)
	e.mounter = startMounter(t, e.socket, false, handoff.ModeTakeover)
	st := &stagedVolume{VolumeID: "vol", Source: "objfuse:bucket-1", MounterUID: mounterUID, MountGroup: &group, Staging: e.staging, Targets: map[string]bool{e.target: false}}
	if err := os.MkdirAll(e.d.node.state.volumeDir("vol"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := e.d.node.state.save(st); err != nil {
		t.Fatal(err)
	}
	if err := e.d.node.mountVolume(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	return e
}

// restartNode starts a new node plugin over the same state and mounts.
func (e *takeoverEnv) restartNode() {
	d, err := New(e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.d = d
}

// restartMounter kills the mounter and starts another at its socket.
func (e *takeoverEnv) restartMounter(resumable bool) *fakeMounter {
	e.mounter.die()
	e.mounter = startMounter(e.t, e.socket, resumable, handoff.ModeTakeover)
	return e.mounter
}

func (e *takeoverEnv) reconcile() { e.d.node.reconcile(context.Background()) }

// told are the reasons of the Events told so far.
func (e *takeoverEnv) told() []string {
	e.events.mu.Lock()
	defer e.events.mu.Unlock()
	var reasons []string
	for _, m := range e.events.messages {
		reasons = append(reasons, strings.SplitN(m, ":", 2)[0])
	}
	return reasons
}

func (e *takeoverEnv) toldAbout(reason string) string {
	e.events.mu.Lock()
	defer e.events.mu.Unlock()
	for _, m := range e.events.messages {
		if strings.HasPrefix(m, reason+":") {
			return m
		}
	}
	return ""
}

// keptName is what /proc names the handle the node keeps, "" for none.
func (e *takeoverEnv) keptName() string {
	k := e.d.node.keeper
	k.mu.Lock()
	defer k.mu.Unlock()
	fd, ok := k.kept["vol"]
	if !ok {
		return ""
	}
	return fdName(e.t, fd)
}

func (e *takeoverEnv) stagingMinor() int {
	m, ok, _ := mounts.Mounted(e.fake, e.staging)
	if !ok {
		e.t.Fatalf("nothing mounted at %s", e.staging)
	}
	return m.Minor
}

// callsSince are the fake's mount calls after the first n, but for
// readahead, which changes no mount.
func (e *takeoverEnv) callsSince(n int) []string {
	return slices.DeleteFunc(slices.Clone(e.fake.Calls[n:]), func(c string) bool { return strings.HasPrefix(c, "readahead ") })
}

// The kept handle's life: kept at stage (the connection's own, not a
// copy the mounter could lose), a duplicate for each hand-over, closed
// when a repair replaces the mount and after the unmount at NodeUnstage;
// a handle whose connection ended (aborted) is dropped as dead.
func TestConnKeeperLifecycle(t *testing.T) {
	e := newTakeoverEnv(t, true)
	k := e.d.node.keeper
	first := e.keptName()
	if first == "" || first != e.mounter.servedName(t) {
		t.Fatalf("kept %q at stage, want the handle the mounter serves (%s)", first, e.mounter.servedName(t))
	}
	if conn, ok := k.connection("vol"); !ok || conn != e.stagingMinor() {
		t.Fatalf("kept connection %d (%v), want the staging mount's %d", conn, ok, e.stagingMinor())
	}
	fd, err := k.dup("vol")
	if err != nil || fdName(t, fd) != first {
		t.Fatalf("dup: %v, want a handle of %s", err, first)
	}
	if flags, _, _ := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0); flags&syscall.FD_CLOEXEC == 0 {
		t.Fatal("a duplicate to hand over is not close-on-exec")
	}
	closeFD(fd)

	// A repair replaces the mount: the old handle is closed, the new kept.
	st, _ := e.d.node.state.load("vol")
	e.mounter.die()
	e.mounter = startMounter(t, e.socket, false, handoff.ModeRepair)
	if err := e.d.node.mountVolume(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	// The fake kernel's (the pipe's write end) stays: the target still
	// mounts the old connection under the new one.
	if n := handlesOn(t, first); n != 1 {
		t.Fatalf("%d handles of the replaced connection open, want the fake kernel's alone", n)
	}
	second := e.keptName()
	if second == "" || second == first {
		t.Fatalf("kept %q after the repair, want the new connection's", second)
	}

	// NodeUnstage (after the unpublish): after the unmount, nothing of
	// it is kept.
	if _, err := e.d.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: e.target}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.node.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: "vol", StagingTargetPath: e.staging}); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.connection("vol"); ok || handlesOn(t, second) != 0 {
		t.Fatalf("after NodeUnstage: kept %v, %d handles of the connection open", ok, handlesOn(t, second))
	}

	// An aborted connection's handle is dead: dropped, not handed over.
	fd, err = e.fake.MountFUSE(e.staging, "objfuse:bucket-1", false)
	if err != nil {
		t.Fatal(err)
	}
	k.keep("vol", fd)
	m, _, _ := mounts.Mounted(e.fake, e.staging)
	e.fake.Abort(m)
	if _, ok := k.connection("vol"); ok {
		t.Fatal("an aborted connection is kept as alive")
	}
	if _, err := k.dup("vol"); err == nil {
		t.Fatal("a dead connection's handle was handed out")
	}

	// Takeover off: nothing is kept, what is given is closed.
	var off *connKeeper
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	fd, _ = handoff.DupHandle(int(r.Fd()))
	off.keep("vol", fd)
	if _, ok := off.connection("vol"); ok || handlesOn(t, fdName(t, int(r.Fd()))) != 2 { // the pipe's two ends
		t.Fatal("a nil keeper kept a handle")
	}
}

// The decision for a hung mount whose connection the node keeps.
func TestDecideTakeover(t *testing.T) {
	const src = "objfuse:bucket-1"
	refused := &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	timeout := context.DeadlineExceeded
	cases := []struct {
		name    string
		seen    mounterSeen
		waited  time.Duration
		want    takeoverStep
		wantWhy string
	}{
		{"serving: slow, not gone", seeMounter(handoff.Reply{OK: true, Serving: true, Source: src + "/"}, nil), 0, takeoverNotMine, ""},
		{"restarted, resumable", seeMounter(handoff.Reply{OK: true, Resumable: true, Source: src + "/"}, nil), time.Second, takeoverNow, ""},
		{"restarted late, resumable", seeMounter(handoff.Reply{OK: true, Resumable: true, Source: src + "/"}, nil), 2 * takeoverBound, takeoverNow, ""},
		{"restarted, not resumable", seeMounter(handoff.Reply{OK: true, Source: src + "/"}, nil), 0, takeoverGiveUp, "cannot resume"},
		{"another volume's mounter", seeMounter(handoff.Reply{OK: true, Resumable: true, Source: "objfuse:other/"}, nil), 0, takeoverGiveUp, `serves "objfuse:other/"`},
		{"socket silent within the bound", seeMounter(handoff.Reply{}, refused), takeoverBound - time.Second, takeoverWait, ""},
		{"socket silent past the bound", seeMounter(handoff.Reply{}, refused), takeoverBound, takeoverGiveUp, "within 1m0s"},
		{"socket gone with its pod", seeMounter(handoff.Reply{}, &os.PathError{Op: "open", Err: syscall.ENOENT}), 0, takeoverWait, ""},
		{"accepts, never answers: stuck", seeMounter(handoff.Reply{}, timeout), takeoverBound * 2, takeoverNotMine, ""},
	}
	for _, tc := range cases {
		step, why := decideTakeover(tc.seen, src, tc.waited)
		if step != tc.want || !strings.Contains(why, tc.wantWhy) || (tc.wantWhy == "") != (why == "") {
			t.Errorf("%s: step %d (%q), want %d saying %q", tc.name, step, why, tc.want, tc.wantWhy)
		}
	}
}

// The mounter restarts (its container, OnFailure) and can resume: the
// node hands it the connection it kept, with the mount group as at
// stage, and touches no mount: the pods' mounts stay as they are.
func TestARestartedMounterTakesTheConnectionOver(t *testing.T) {
	e := newTakeoverEnv(t, true)
	kept := e.keptName()
	next := e.restartMounter(true)
	e.fake.SetHung(e.staging) // requests queue on the kept connection
	calls := len(e.fake.Calls)
	e.reconcile()
	got := next.takeOvers()
	if len(got) != 1 || got[0].MountGroup == nil || *got[0].MountGroup != group {
		t.Fatalf("takeover requests %+v, want one with mount group %d", got, group)
	}
	if name := next.servedName(t); name != kept {
		t.Fatalf("the successor serves %s, want the kept connection %s", name, kept)
	}
	if c := e.callsSince(calls); len(c) != 0 {
		t.Fatalf("mount calls %q during a takeover, want none", c)
	}
	if r := e.told(); !slices.Equal(r, []string{reasonTakenOver}) {
		t.Fatalf("Events %q, want %s only", r, reasonTakenOver)
	}
	if why := e.d.node.state.abnormalReason("vol"); why != "" {
		t.Fatalf("abnormal after the takeover: %s", why)
	}
	if e.keptName() != kept {
		t.Fatal("the node no longer keeps the connection it handed over")
	}
}

// When no successor can take the connection over, the node falls back
// to today's repair: it aborts the connection, closes its handle, mounts
// again and binds the target, and tells the pods the repair's Event and
// one saying why there was no takeover.
func TestNoTakeoverFallsBackToRepair(t *testing.T) {
	cases := []struct {
		name  string
		setup func(e *takeoverEnv)
		// stuck: the mounter is aborted on this check, and restarts
		// (its connection ended) for the next one to repair.
		stuck   bool
		wantWhy string
	}{
		{"the restarted mounter cannot resume", func(e *takeoverEnv) { e.restartMounter(false) }, false, "cannot resume"},
		{"the takeover fails", func(e *takeoverEnv) { e.restartMounter(true).set(func(m *fakeMounter) { m.refuseTakeOver = true }) }, false,
			"could not take it over: mounter refused serve: the saved state does not match"},
		{"stuck mounter", func(e *takeoverEnv) {
			e.mounter.die()
			stuck(e.t, e.socket)
			e.d.node.state.hangs["vol"] = hangsBeforeAbort - 1
		}, true, "stuck"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTakeoverEnv(t, true)
			kept, minor := e.keptName(), e.stagingMinor()
			tc.setup(e)
			e.fake.SetHung(e.staging)
			calls := len(e.fake.Calls)
			if tc.stuck {
				e.reconcile()
				e.mounter = startMounter(t, e.socket, false, handoff.ModeRepair)
			}
			e.reconcile()
			checkFellBack(t, e, calls, kept, minor, tc.wantWhy)
		})
	}
}

// checkFellBack: the node aborted connection minor (handle kept), told
// why, repaired, and keeps the new connection.
func checkFellBack(t *testing.T, e *takeoverEnv, calls int, kept string, minor int, wantWhy string) {
	t.Helper()
	c := e.callsSince(calls)
	want := []string{"abort " + e.staging, "unmount " + e.staging, "mount-fuse " + e.staging, "bind " + e.staging + " " + e.target}
	if i := slices.Index(c, want[0]); i < 0 || !slices.Equal(c[i:i+len(want)], want) {
		t.Fatalf("mount calls %q, want %q", c, want)
	}
	if r := e.told(); !slices.Equal(r, []string{reasonTakeoverFailed, reasonRepaired}) {
		t.Fatalf("Events %q, want %s then %s", r, reasonTakeoverFailed, reasonRepaired)
	}
	if why := e.toldAbout(reasonTakeoverFailed); !strings.Contains(why, wantWhy) {
		t.Fatalf("%s, want it to say %q", why, wantWhy)
	}
	if n := handlesOn(t, kept); n != 0 {
		t.Fatalf("%d handles of the aborted connection left", n)
	}
	if conn, ok := e.d.node.keeper.connection("vol"); !ok || conn == minor || conn != e.stagingMinor() {
		t.Fatalf("keeps connection %d (%v) after the repair, want the new mount's %d", conn, ok, e.stagingMinor())
	}
}

// stuck listens at socket and never answers.
func stuck(t *testing.T, socket string) {
	l, err := handoff.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// A mounter that does not come back: the node waits for it, the mount
// hung but its connection intact, up to the bound; then it gives up,
// aborts, and repairs once a mounter is back.
func TestAMounterThatDoesNotComeBackIsWaitedForThenRepaired(t *testing.T) {
	e := newTakeoverEnv(t, true)
	e.reconcile() // healthy: the mounter says how its mount survives it
	kept := e.keptName()
	e.mounter.die()
	e.fake.SetHung(e.staging)
	calls := len(e.fake.Calls)
	e.reconcile()
	e.reconcile()
	if c := e.callsSince(calls); len(c) != 0 || e.keptName() != kept {
		t.Fatalf("mount calls %q while waiting for a takeover, want none and the connection kept", c)
	}
	stats, err := e.d.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: "vol", VolumePath: e.target})
	if c := stats.GetVolumeCondition(); err != nil || !c.GetAbnormal() || !strings.Contains(c.GetMessage(), "waits for its mounter") || !strings.Contains(c.GetMessage(), "survival mode: takeover") {
		t.Fatalf("condition while waiting: %v %v", c, err)
	}
	if r := e.told(); len(r) != 0 {
		t.Fatalf("Events %q while waiting, want none", r)
	}
	// The bound passes (as if the checks had gone on for that long).
	e.d.node.state.takeoverSince["vol"] = time.Now().Add(-takeoverBound)
	minor := e.stagingMinor()
	e.reconcile()
	if r := e.told(); !slices.Equal(r, []string{reasonTakeoverFailed}) || !strings.Contains(e.toldAbout(reasonTakeoverFailed), "within 1m0s") {
		t.Fatalf("Events %q past the bound, want %s saying it waited", r, reasonTakeoverFailed)
	}
	e.mounter = startMounter(t, e.socket, false, handoff.ModeRepair)
	e.reconcile()
	checkFellBack(t, e, calls, kept, minor, "within 1m0s")
}

// Takeover off is today's behaviour: nothing is kept, a dead mounter's
// mount is dead, and it is repaired with today's Event alone, even for
// a mounter that could resume; a hung one is aborted after
// hangsBeforeAbort checks, never handed over.
func TestTakeoverOffIsTodaysRepair(t *testing.T) {
	for _, hung := range []bool{false, true} {
		e := newTakeoverEnv(t, false)
		if e.d.node.keeper != nil {
			t.Fatal("takeover off keeps connections")
		}
		served := e.mounter.servedName(t)
		if n := handlesOn(t, served); n != 2 {
			t.Fatalf("%d handles of the connection open, want the mounter's and the fake kernel's (the pipe's write end) alone", n)
		}
		next := e.restartMounter(true)
		passes := 1
		if hung {
			e.fake.SetHung(e.staging)
			passes = hangsBeforeAbort
		} else {
			e.fake.SetDead(e.staging)
		}
		calls := len(e.fake.Calls)
		for range passes {
			e.reconcile()
		}
		if got := next.takeOvers(); len(got) != 0 {
			t.Fatalf("hung %v: takeover requests %+v with takeover off", hung, got)
		}
		want := []string{"unmount " + e.staging, "mount-fuse " + e.staging, "bind " + e.staging + " " + e.target}
		if hung {
			want = append([]string{"abort " + e.staging}, want...)
		}
		if c := e.callsSince(calls); !slices.Equal(c[:len(want)], want) {
			t.Fatalf("hung %v: mount calls %q, want %q", hung, c, want)
		}
		if r := e.told(); !slices.Equal(r, []string{reasonRepaired}) {
			t.Fatalf("hung %v: Events %q, want %s alone", hung, r, reasonRepaired)
		}
	}
}

// A restarted node plugin has lost the handles it kept: it borrows each
// from its serving mounter (OpLend), checks it holds the connection
// mounted at the staging path, and keeps it; a mounter that lends
// another connection's handle is refused, and asked again only after
// lendRetry.
func TestARestartedNodePluginBorrowsTheConnection(t *testing.T) {
	e := newTakeoverEnv(t, true)
	e.restartNode()
	if e.keptName() != "" {
		t.Fatal("a new node plugin keeps a handle")
	}
	e.reconcile()
	if name := e.keptName(); name != e.mounter.servedName(t) {
		t.Fatalf("kept %q after the restart, want the served connection %s", name, e.mounter.servedName(t))
	}
	if conn, ok := e.d.node.keeper.connection("vol"); !ok || conn != e.stagingMinor() {
		t.Fatalf("borrowed connection %d (%v), want %d", conn, ok, e.stagingMinor())
	}
	if mode := e.d.node.state.mode("vol"); mode != handoff.ModeTakeover {
		t.Fatalf("mode %q, want %s", mode, handoff.ModeTakeover)
	}
	var metric dto.Metric
	if err := e.d.metrics.survival.WithLabelValues("vol", handoff.ModeTakeover).Write(&metric); err != nil || metric.GetGauge().GetValue() != 1 {
		t.Fatalf("survival metric for takeover: %v, %v", metric.GetGauge(), err)
	}

	// A mounter lending another connection's handle.
	other, err := e.fake.MountFUSE(filepath.Join(e.t.TempDir(), "elsewhere"), "objfuse:bucket-1", false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(other)
	e.mounter.set(func(m *fakeMounter) { m.lendOther = other })
	e.restartNode()
	lends := e.mounter.asked(handoff.OpLend)
	e.reconcile()
	e.reconcile()
	if e.keptName() != "" {
		t.Fatal("kept a handle of another connection")
	}
	if n := e.mounter.asked(handoff.OpLend) - lends; n != 1 {
		t.Fatalf("asked the same mounter to lend %d times, want once", n)
	}
	if mode := e.d.node.state.mode("vol"); mode != handoff.ModeRepair {
		t.Fatalf("mode %q without a kept connection, want %s", mode, handoff.ModeRepair)
	}
	if n := handlesOn(t, fdName(t, other)); n != 2 {
		t.Fatalf("%d handles of the other connection open, want the test's and the fake kernel's: the refused loan was kept", n)
	}
	var stale dto.Metric
	e.d.metrics.survival.WithLabelValues("vol", handoff.ModeRepair).Write(&stale)
	if stale.GetGauge().GetValue() != 1 {
		t.Fatalf("survival metric for repair: %v", stale.GetGauge())
	}

	// The refusal passes: once lendRetry has, the same mounter is asked
	// again, and its loan kept.
	e.mounter.set(func(m *fakeMounter) { m.lendOther = 0 })
	ask := e.d.node.state.lendAsked["vol"]
	ask.at = time.Now().Add(-lendRetry)
	e.d.node.state.lendAsked["vol"] = ask
	e.reconcile()
	if n := e.mounter.asked(handoff.OpLend) - lends; n != 2 {
		t.Fatalf("asked the mounter to lend %d times once the retry was due, want twice", n)
	}
	if name := e.keptName(); name != e.mounter.servedName(t) {
		t.Fatalf("kept %q once the mounter lent its own connection, want %s", name, e.mounter.servedName(t))
	}
}
