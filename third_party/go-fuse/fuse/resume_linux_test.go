// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

// Tests of taking over a live FUSE connection (MountOptions.ResumeInit,
// ResendNotify, IncEpochNotify) against the kernel. A server runs in a
// child process (this test binary, re-executed) so that it can be
// SIGKILLed while it holds a request, as a crashing server would be;
// the test process keeps its own descriptor of the connection, so the
// kernel keeps the connection and the caller blocked in it.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// resumeChildEnv names the file holding a resumeChildConfig; when set,
// the test binary is a server child rather than a test run.
const resumeChildEnv = "GO_FUSE_RESUME_TEST_CHILD"

// noRaceExitDelay spares helper processes built with -race the race
// detector's default second of sleep at exit.
const noRaceExitDelay = "GORACE=atexit_sleep_ms=0"

// resumeChildFD is where a child finds the /dev/fuse descriptor
// (cmd.ExtraFiles[0]).
const resumeChildFD = 3

// uniqueResend is FUSE_UNIQUE_RESEND from the kernel's fuse.h: the bit
// the kernel sets in the Unique of a request it queues again.
const uniqueResend = uint64(1) << 63

const (
	resumeSlowIno  = 2
	resumeFileIno  = 3
	resumeSlowData = "the read the first server never answered\n"
	resumeFileData = "served by the second server\n"

	// resumeWait bounds every wait on the kernel or a child.
	resumeWait = 15 * time.Second
)

// resumeReaderEnv names a file for the test binary to read and
// report on stdout, as a caller outside the test process.
const resumeReaderEnv = "GO_FUSE_RESUME_TEST_READER"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(resumeChildEnv); cfg != "" {
		if err := runResumeChild(cfg); err != nil {
			fmt.Fprintf(os.Stderr, "resume child: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if path := os.Getenv(resumeReaderEnv); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Stdout.Write(data)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// resumeChildConfig is what a child server is told, as JSON.
type resumeChildConfig struct {
	// Name prefixes the files the child writes in Dir.
	Name string
	Dir  string
	// ResumeInit is passed to MountOptions.ResumeInit.
	ResumeInit *InitIn
	// Resend makes the child call ResendNotify before serving.
	Resend bool
}

// resumeChildStatus is what a child reports once NewServer returned.
type resumeChildStatus struct {
	KernelSettings InitIn
	Resend         Status
}

func (c *resumeChildConfig) path(suffix string) string {
	return filepath.Join(c.Dir, c.Name+suffix)
}

// resumeMarker is the file whose existence lets reads of the slow
// file complete.
func resumeMarker(dir string) string {
	return filepath.Join(dir, "release")
}

func runResumeChild(cfgPath string) error {
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		return fmt.Errorf("reading config: %w", err)
	}
	var cfg resumeChildConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("parsing config %s: %w", cfgPath, err)
	}
	fs := newResumeFS(cfg.path(".ops"), resumeMarker(cfg.Dir))
	srv, err := NewServer(fs, fmt.Sprintf("/dev/fd/%d", resumeChildFD), &MountOptions{
		ResumeInit: cfg.ResumeInit,
		Debug:      true,
		Logger:     log.New(os.Stderr, cfg.Name+": ", log.Lmicroseconds),
	})
	if err != nil {
		return fmt.Errorf("NewServer: %w", err)
	}
	st := resumeChildStatus{KernelSettings: *srv.KernelSettings(), Resend: ENOSYS}
	if cfg.Resend {
		st.Resend = srv.ResendNotify()
	}
	if err := writeJSONFile(cfg.path(".status"), st); err != nil {
		return err
	}
	srv.Serve()
	return nil
}

// writeJSONFile writes v so that a reader sees all of it or nothing.
func writeJSONFile(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("publishing %s: %w", path, err)
	}
	return nil
}

// resumeFS serves a root with two files: "slow", whose reads block
// until the marker exists, and "file". It keeps no state, so any
// server process can answer for nodes an earlier one handed out. Every
// LOOKUP and READ, and every READ interrupted, is appended to the ops
// file, for the test to see which server got what.
type resumeFS struct {
	RawFileSystem
	opsPath string
	marker  string
	mu      sync.Mutex
}

func newResumeFS(opsPath, marker string) *resumeFS {
	return &resumeFS{RawFileSystem: NewDefaultRawFileSystem(), opsPath: opsPath, marker: marker}
}

// record appends op to the ops file with the request's unique and the
// calling thread (the header's pid is the caller's thread id).
func (f *resumeFS) record(op string, h *InHeader, arg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	file, err := os.OpenFile(f.opsPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		log.Printf("recording %s: %v", op, err)
		return
	}
	defer file.Close()
	fmt.Fprintf(file, "%s %#x %s %d\n", op, h.Unique, arg, h.Caller.Pid)
}

func resumeAttr(ino uint64, out *Attr) bool {
	*out = Attr{Ino: ino, Nlink: 1, Mode: S_IFREG | 0o644}
	switch ino {
	case FUSE_ROOT_ID:
		out.Mode = S_IFDIR | 0o755
	case resumeSlowIno:
		out.Size = uint64(len(resumeSlowData))
	case resumeFileIno:
		out.Size = uint64(len(resumeFileData))
	default:
		return false
	}
	return true
}

func (f *resumeFS) Lookup(cancel <-chan struct{}, header *InHeader, name string, out *EntryOut) Status {
	f.record("LOOKUP", header, name)
	ino := map[string]uint64{"slow": resumeSlowIno, "file": resumeFileIno}[name]
	if header.NodeId != FUSE_ROOT_ID || ino == 0 {
		return ENOENT
	}
	out.NodeId = ino
	// Long timeouts: only an epoch change should make the kernel
	// look the name up again.
	out.SetEntryTimeout(time.Hour)
	out.SetAttrTimeout(time.Hour)
	resumeAttr(ino, &out.Attr)
	return OK
}

func (f *resumeFS) GetAttr(cancel <-chan struct{}, in *GetAttrIn, out *AttrOut) Status {
	if !resumeAttr(in.NodeId, &out.Attr) {
		return ENOENT
	}
	out.SetTimeout(time.Hour)
	return OK
}

func (f *resumeFS) Open(cancel <-chan struct{}, in *OpenIn, out *OpenOut) Status {
	// Direct I/O: every read(2) is one READ, with no page cache or
	// readahead to blur which server answered it.
	out.OpenFlags = FOPEN_DIRECT_IO
	return OK
}

func (f *resumeFS) Read(cancel <-chan struct{}, in *ReadIn, buf []byte) (ReadResult, Status) {
	f.record("READ", &in.InHeader, strconv.FormatUint(in.NodeId, 10))
	data := resumeFileData
	if in.NodeId == resumeSlowIno {
		data = resumeSlowData
		if err := waitForFile(f.marker, cancel); err != nil {
			f.record("INTERRUPTED", &in.InHeader, strconv.FormatUint(in.NodeId, 10))
			return nil, EINTR
		}
	}
	if in.Offset >= uint64(len(data)) {
		return ReadResultData(nil), OK
	}
	return ReadResultData([]byte(data[in.Offset:])), OK
}

// waitForFile polls for path until it exists or cancel is closed.
func waitForFile(path string, cancel <-chan struct{}) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-cancel:
			return errors.New("interrupted")
		case <-tick.C:
		}
	}
}

// resumeMount is a FUSE connection mounted by the test, the way a
// privileged helper would: the test holds the /dev/fuse descriptor
// for the whole test, so the connection outlives any server.
type resumeMount struct {
	fd  int
	dir string // mount point
	tmp string // for configs, reports and logs

	// callers are closed when processes that use the mount exit;
	// the mount's cleanup waits for them once the connection is
	// gone, as a caller whose request a dead server took cannot
	// even be killed before that.
	callers []chan struct{}
}

func newResumeMount(t *testing.T) *resumeMount {
	t.Helper()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("opening /dev/fuse: %v", err)
	}
	m := &resumeMount{fd: fd, dir: t.TempDir(), tmp: t.TempDir()}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := unix.Mount("resumetest", m.dir, "fuse.resumetest", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		t.Fatalf("mount %s (%s): %v", m.dir, opts, err)
	}
	// Cleanups run last-in first-out: the servers (registered
	// later) are killed first, then the mount goes and the last
	// descriptor closes, which ends the connection and fails
	// whatever still waits in it.
	t.Cleanup(func() {
		if err := unix.Unmount(m.dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", m.dir, err)
		}
		unix.Close(m.fd)
		deadline := time.After(resumeWait)
		for _, exited := range m.callers {
			select {
			case <-exited:
			case <-deadline:
				t.Errorf("a caller still waits on the connection %v after it ended", resumeWait)
				return
			}
		}
	})
	return m
}

// startChild runs a server child on the connection.
func (m *resumeMount) startChild(t *testing.T, cfg resumeChildConfig) *exec.Cmd {
	t.Helper()
	cfg.Dir = m.tmp
	cfgPath := cfg.path(".json")
	if err := writeJSONFile(cfgPath, cfg); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(cfg.path(".log"))
	if err != nil {
		t.Fatalf("creating child log: %v", err)
	}
	defer logFile.Close()
	// A duplicate for the child: exec.Cmd does not close it, and
	// the test's own descriptor stays with the test.
	dup, err := unix.Dup(m.fd)
	if err != nil {
		t.Fatalf("dup /dev/fuse: %v", err)
	}
	fuseFile := os.NewFile(uintptr(dup), "/dev/fuse")
	defer fuseFile.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), resumeChildEnv+"="+cfgPath, noRaceExitDelay)
	cmd.ExtraFiles = []*os.File{fuseFile}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting child %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if log, err := os.ReadFile(cfg.path(".log")); err == nil {
			t.Logf("log of %s:\n%s", cfg.Name, log)
		}
	})
	return cmd
}

// waitFor polls cond until it holds or resumeWait passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(resumeWait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", resumeWait, what)
		}
		<-tick.C
	}
}

// childStatus waits for the child's report that NewServer returned.
func (m *resumeMount) childStatus(t *testing.T, name string) resumeChildStatus {
	t.Helper()
	path := filepath.Join(m.tmp, name+".status")
	var data []byte
	waitFor(t, name+" to start serving", func() bool {
		var err error
		data, err = os.ReadFile(path)
		return err == nil
	})
	var st resumeChildStatus
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	return st
}

type resumeOp struct {
	op     string
	unique uint64
	arg    string
	tid    int // the calling thread
}

// ops returns the requests the named child recorded so far.
func (m *resumeMount) ops(t *testing.T, name string) []resumeOp {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(m.tmp, name+".ops"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		t.Fatalf("reading ops of %s: %v", name, err)
	}
	var ops []resumeOp
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 {
			t.Fatalf("bad op line %q of %s", sc.Text(), name)
		}
		u, err := strconv.ParseUint(f[1], 0, 64)
		if err != nil {
			t.Fatalf("bad unique in %q of %s: %v", sc.Text(), name, err)
		}
		tid, err := strconv.Atoi(f[3])
		if err != nil {
			t.Fatalf("bad thread id in %q of %s: %v", sc.Text(), name, err)
		}
		ops = append(ops, resumeOp{f[0], u, f[2], tid})
	}
	return ops
}

// waitOp waits until the named child recorded op on arg, and returns it.
func (m *resumeMount) waitOp(t *testing.T, name, op, arg string) resumeOp {
	t.Helper()
	var found resumeOp
	waitFor(t, fmt.Sprintf("%s to receive %s %s", name, op, arg), func() bool {
		for _, o := range m.ops(t, name) {
			if o.op == op && o.arg == arg {
				found = o
				return true
			}
		}
		return false
	})
	return found
}

type readResult struct {
	data []byte
	err  error
}

// blockedRead starts a read of the slow file and has the first server
// (already started) receive it. The read runs in another process: a
// process holding a file on a connection without a server cannot
// fork and exec, as exec closes the file and the kernel waits for
// the FLUSH to be answered.
func (m *resumeMount) blockedRead(t *testing.T, server string) (<-chan readResult, resumeOp, *os.Process) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), resumeReaderEnv+"="+filepath.Join(m.dir, "slow"), noRaceExitDelay)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting reader: %v", err)
	}
	done := make(chan readResult, 1)
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("reader: %w: %s", err, stderr.Bytes())
		}
		done <- readResult{stdout.Bytes(), err}
		close(exited)
	}()
	// Killed before the mount goes (cleanups run last in, first
	// out), reaped by the mount's cleanup after.
	t.Cleanup(func() { cmd.Process.Kill() })
	m.callers = append(m.callers, exited)
	op := m.waitOp(t, server, "READ", strconv.Itoa(resumeSlowIno))
	if op.unique&uniqueResend != 0 {
		t.Errorf("first READ has unique %#x with FUSE_UNIQUE_RESEND set", op.unique)
	}
	return done, op, cmd.Process
}

// kill SIGKILLs a server child and reaps it: from then on only the
// test's descriptor keeps the connection.
func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("killing server: %v", err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatalf("server exited cleanly, want killed")
	}
}

func notDone(t *testing.T, done <-chan readResult, when string) {
	t.Helper()
	select {
	case r := <-done:
		t.Fatalf("read returned %q, %v %s; want it blocked", r.data, r.err, when)
	default:
	}
}

// TestResumeTakeover is the point of ResumeInit: a server dies holding
// a READ, a new process takes over the connection without INIT, has
// the kernel resend the READ, and the caller gets its data as if
// nothing happened.
func TestResumeTakeover(t *testing.T) {
	m := newResumeMount(t)
	first := m.startChild(t, resumeChildConfig{Name: "first"})
	settings := m.childStatus(t, "first").KernelSettings
	if settings.Flags64()&CAP_HAS_RESEND == 0 {
		t.Fatalf("kernel INIT %d.%d flags %#x: no FUSE_NOTIFY_RESEND (needs Linux 6.9)", settings.Major, settings.Minor, settings.Flags64())
	}

	done, firstRead, reader := m.blockedRead(t, "first")
	kill(t, first)
	notDone(t, done, "after the server was killed")

	m.startChild(t, resumeChildConfig{Name: "second", ResumeInit: &settings, Resend: true})
	st := m.childStatus(t, "second")
	if st.Resend != OK {
		t.Fatalf("ResendNotify: %v", st.Resend)
	}
	if st.KernelSettings != settings {
		t.Errorf("second server's KernelSettings %+v, want the first's %+v", st.KernelSettings, settings)
	}

	resent := m.waitOp(t, "second", "READ", strconv.Itoa(resumeSlowIno))
	if resent.unique != firstRead.unique|uniqueResend {
		t.Errorf("resent READ has unique %#x, want %#x (the first's %#x with FUSE_UNIQUE_RESEND)",
			resent.unique, firstRead.unique|uniqueResend, firstRead.unique)
	}
	notDone(t, done, "before the second server answered")

	// The kernel interrupts the resent request by its new unique:
	// a signal to the caller (SIGURG, which Go ignores) makes it
	// send INTERRUPT, go-fuse cancels the READ, the caller's read
	// fails with EINTR and Go reads again, in a fresh request. The
	// signal goes to the thread blocked in read(2): one sent to the
	// process may be taken by another thread, and the read waits on.
	if err := syscall.Tgkill(reader.Pid, resent.tid, syscall.SIGURG); err != nil {
		t.Fatalf("signalling the reader: %v", err)
	}
	if intr := m.waitOp(t, "second", "INTERRUPTED", strconv.Itoa(resumeSlowIno)); intr.unique != resent.unique {
		t.Errorf("interrupted READ %#x, want the resent %#x", intr.unique, resent.unique)
	}
	waitFor(t, "the READ after the interrupt", func() bool {
		for _, o := range m.ops(t, "second") {
			if o.op == "READ" && o.arg == strconv.Itoa(resumeSlowIno) && o.unique&uniqueResend == 0 {
				return true
			}
		}
		return false
	})
	notDone(t, done, "after the interrupt")

	if err := os.WriteFile(resumeMarker(m.tmp), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || string(r.data) != resumeSlowData {
			t.Fatalf("blocked read returned %q, %v; want %q", r.data, r.err, resumeSlowData)
		}
	case <-time.After(resumeWait):
		t.Fatalf("blocked read did not complete within %v of the takeover", resumeWait)
	}

	// New requests go to the second server: a name the first never
	// looked up, and a read of it.
	path := filepath.Join(m.dir, "file")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("stat after takeover: %v", err)
	}
	if fi.Size() != int64(len(resumeFileData)) {
		t.Errorf("stat after takeover: size %d, want %d", fi.Size(), len(resumeFileData))
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != resumeFileData {
		t.Fatalf("read after takeover: %q, %v; want %q", data, err, resumeFileData)
	}
	m.waitOp(t, "second", "LOOKUP", "file")
	for _, o := range m.ops(t, "second") {
		t.Logf("second server got %s %#x %s", o.op, o.unique, o.arg)
	}
}

// TestResumeWithoutResumeInit shows why ResumeInit is needed: a plain
// NewServer on a connection past INIT takes the first request it
// reads for INIT, so it never learns the kernel's settings, cannot ask
// for a resend, and the READ its predecessor took stays lost.
func TestResumeWithoutResumeInit(t *testing.T) {
	m := newResumeMount(t)
	first := m.startChild(t, resumeChildConfig{Name: "first"})
	m.childStatus(t, "first")
	done, _, _ := m.blockedRead(t, "first")
	kill(t, first)

	m.startChild(t, resumeChildConfig{Name: "second", Resend: true})
	// Nothing is queued, so the second server waits in NewServer
	// for an INIT that never comes, until some request arrives.
	stat := make(chan error, 1)
	go func() {
		_, err := os.Stat(filepath.Join(m.dir, "file"))
		stat <- err
	}()
	st := m.childStatus(t, "second")
	if st.KernelSettings.Major != 0 || st.KernelSettings.Minor != 0 {
		t.Errorf("second server has kernel settings %d.%d, want none (it never saw INIT)",
			st.KernelSettings.Major, st.KernelSettings.Minor)
	}
	if st.Resend != ENOSYS {
		t.Errorf("ResendNotify without kernel settings: %v, want ENOSYS", st.Resend)
	}
	if ops := m.ops(t, "second"); len(ops) == 0 || ops[0].op != "LOOKUP" {
		t.Errorf("second server's first request: %v, want the LOOKUP it took for INIT", ops)
	}
	select {
	case err := <-stat:
		t.Logf("stat through the second server: %v", err)
	case <-time.After(resumeWait):
		t.Errorf("stat did not complete within %v", resumeWait)
	}
	notDone(t, done, "without a resend")
}

// TestEpochNotifyRelooksUp checks IncEpochNotify against the kernel:
// a name cached for an hour is looked up again after it.
func TestEpochNotifyRelooksUp(t *testing.T) {
	m := newResumeMount(t)
	fs := newResumeFS(filepath.Join(m.tmp, "epoch.ops"), resumeMarker(m.tmp))
	srv, err := NewServer(fs, fmt.Sprintf("/dev/fd/%d", m.fd), &MountOptions{})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	go srv.Serve()
	// NewServer took the descriptor: the server closes it when the
	// connection ends, and the mount's cleanup must not close it
	// again (its number may be reused by then).
	m.fd = -1

	if srv.KernelSettings().Minor < 44 {
		t.Fatalf("kernel protocol 7.%d: no FUSE_NOTIFY_INC_EPOCH (needs 7.44, Linux 6.16)", srv.KernelSettings().Minor)
	}
	lookups := func() int {
		n := 0
		for _, o := range m.ops(t, "epoch") {
			if o.op == "LOOKUP" && o.arg == "file" {
				n++
			}
		}
		return n
	}
	path := filepath.Join(m.dir, "file")
	for i := 0; i < 2; i++ {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("stat %d: %v", i, err)
		}
	}
	if n := lookups(); n != 1 {
		t.Fatalf("%d LOOKUPs for two stats within the entry timeout, want 1", n)
	}
	if st := srv.IncEpochNotify(); st != OK {
		t.Fatalf("IncEpochNotify: %v", st)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stat after IncEpochNotify: %v", err)
	}
	if n := lookups(); n != 2 {
		t.Errorf("%d LOOKUPs after IncEpochNotify, want 2", n)
	}
}
