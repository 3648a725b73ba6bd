package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
	"github.com/objfuse/objfuse/test/miniotest"
)

// kills is how many times TestTakeoverAfterSIGKILL kills the mounter.
const kills = 20

// TestTakeoverAfterSIGKILL: a writer and a reader, plain processes, use
// a mount whose mounter is SIGKILLed again and again at random moments
// and restarted, as the node plugin does: it keeps the FUSE connection
// and hands it to the successor, which takes it over. No call of either
// may fail, but one on a handle whose writes since its last fsync died
// with a mounter (EIO, once per loss, each matched by the mounter's
// report of it); the descriptors both opened before the kills serve them
// to the end; every line the writer fsynced is in S3.
func TestTakeoverAfterSIGKILL(t *testing.T) {
	srv, staging, m, fd := servedMount(t)
	file := filepath.Join(m.mnt, "log")
	w := startWorkload(t, "writer", file)
	w.waitAcks(t, 1)
	r := startWorkload(t, "reader", file)
	r.waitAcks(t, 1)

	var stalls []time.Duration
	var killTimes []string
	for i := range kills {
		// A random moment, while both keep calling.
		<-time.After(time.Duration(50+rand.IntN(450)) * time.Millisecond)
		acked := w.acks()
		killed := time.Now()
		killTimes = append(killTimes, killed.Format("05.000"))
		m.cmd.Process.Kill()
		<-m.exited
		m = restartHandoff(t, m, srv, "--staging-dir", staging)
		rep, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpStatus}, -1)
		if err != nil || !rep.Resumable {
			t.Fatalf("kill %d: the successor cannot take over: %+v %v", i+1, rep, err)
		}
		hand(t, m.sock, fd, true)
		if rep, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpStatus}, -1); err != nil || rep.Mode != handoff.ModeTakeover {
			t.Fatalf("kill %d: the successor reports mode %q (%v), want %q", i+1, rep.Mode, err, handoff.ModeTakeover)
		}
		w.waitAcks(t, acked+1)
		stalls = append(stalls, time.Since(killed))
	}
	w.stop(t)
	r.stop(t)
	m.release(t)

	slices.Sort(stalls)
	t.Logf("%d kills: stall until the writer's next fsync: p50 %v, max %v", kills,
		stalls[len(stalls)/2].Round(time.Millisecond), stalls[len(stalls)-1].Round(time.Millisecond))

	if len(r.failures) > 0 {
		t.Errorf("reader: %d failed calls: %q", len(r.failures), r.failures)
	}
	// A writer's failure is explained when a mounter reported the loss
	// of that handle's unflushed writes; each loss fails one call, and
	// the writer goes on through the same descriptor.
	lost := strings.Count(m.logs(), "writes to a file since its last flush were in the mounter that died")
	// An upload the dead mounter started may still land after its
	// successor read the file: the successor's next upload then finds
	// another version and keeps its change under a conflict name, telling
	// the writer (EIO), as with any other writer.
	conflicts := strings.Count(m.logs(), "write conflict: another writer replaced the file")
	for _, f := range w.failures {
		if !strings.Contains(f, "input/output error") {
			t.Errorf("writer: a failure other than EIO: %s", f)
		}
	}
	if len(w.failures) != lost+conflicts {
		t.Errorf("writer: %d failed calls, mounters reported %d lost handles and %d conflicts: %q", len(w.failures), lost, conflicts, w.failures)
	}
	t.Logf("writer: %d lines fsynced, %d handles lost with a mounter's memory", w.acks(), lost)

	body := storedObject(t, srv, m.bucket, "log")
	n, repeated, ok := countedLines(string(body))
	for _, k := range repeated {
		if !slices.ContainsFunc(w.failures, func(f string) bool { return strings.HasPrefix(f, fmt.Sprintf("fsync %d:", k)) }) {
			at := strings.Index(string(body), fmt.Sprintf("\n%d\n%d\n", k, k))
			t.Errorf("line %d is twice in S3, but its fsync did not fail: %q; S3: %q; acked at %v; kills at %v", k, w.failures, body[max(0, at-20):min(len(body), at+30)], w.ackedAt[k+1].Format("05.000"), killTimes)
		}
	}
	if !ok || n < w.acks() {
		t.Errorf("S3 holds %d whole counted lines (ok=%v), want the %d fsynced: %s", n, ok, w.acks(), linesMismatch(string(body)))
	}
}

// servedMount starts a mounter with a staging directory its successors
// share (and flags), mounts FUSE as the node plugin does and hands the
// connection over; fd is the node plugin's copy, which outlives each
// mounter (closed when the test ends).
func servedMount(t *testing.T, flags ...string) (srv *miniotest.Server, staging string, m *handoffMounter, fd int) {
	t.Helper()
	srv = miniotest.Start(t)
	staging = t.TempDir()
	m = startHandoff(t, srv, append([]string{"--staging-dir", staging}, flags...)...)
	fd, err := (mounts.System{}).MountFUSE(m.mnt, "objfuse:"+m.bucket, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	hand(t, m.sock, fd, false)
	if err := (mounts.System{}).DisablePoll(m.mnt); err != nil {
		t.Fatal(err)
	}
	return srv, staging, m, fd
}

// storedObject reads key straight from S3.
func storedObject(t *testing.T, srv *miniotest.Server, bucket, key string) []byte {
	t.Helper()
	obj, err := srv.Client().GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// hand gives the mounter at sock a duplicate of the connection, as the
// node plugin does at NodeStage (takeOver false) or after a restart.
func hand(t *testing.T, sock string, fd int, takeOver bool) {
	t.Helper()
	dup, err := syscall.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := handoff.Call(context.Background(), sock, handoff.Request{Op: handoff.OpServe, TakeOver: takeOver, Kept: true}, dup)
	syscall.Close(dup)
	if err != nil || !rep.Serving {
		t.Fatalf("serve (takeOver %v): %+v %v", takeOver, rep, err)
	}
}

// restartHandoff starts a successor of the dead mounter m, on the same
// socket and staging directory, as the pod's restart of its container.
func restartHandoff(t *testing.T, m *handoffMounter, srv *miniotest.Server, flags ...string) *handoffMounter {
	t.Helper()
	n := &handoffMounter{sock: m.sock, mnt: m.mnt, bucket: m.bucket, exited: make(chan error, 1), stderr: m.stderr}
	args := append([]string{"--handoff", n.sock, "--endpoint", srv.Endpoint, "--path-style", "--credentials-dir", srv.CredsDir}, flags...)
	n.cmd = exec.Command(binary, append(args, n.bucket)...)
	n.cmd.Stderr = n.stderr
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.exited <- n.cmd.Wait() }()
	t.Cleanup(func() { n.cmd.Process.Kill() })
	waitFor(t, "the successor's socket", func() bool {
		return exec.Command(binary, "--probe", n.sock).Run() == nil
	})
	return n
}

// workload is a writer or reader process (this test binary, in the role
// TestMain gives it) and what it reported on its standard output.
type workload struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}

	mu       sync.Mutex
	acked    int
	ackedAt  map[int]time.Time
	failures []string
	cond     *sync.Cond
}

// roleEnv names the role TestMain runs the test binary in.
const roleEnv = "OBJFUSE_TEST_ROLE"

func startWorkload(t *testing.T, role, file string, env ...string) *workload {
	t.Helper()
	w := &workload{done: make(chan struct{}), ackedAt: map[int]time.Time{}}
	w.cond = sync.NewCond(&w.mu)
	w.cmd = exec.Command(os.Args[0])
	w.cmd.Env = append(append(os.Environ(), env...), roleEnv+"="+role, "OBJFUSE_TEST_FILE="+file)
	w.cmd.Stderr = os.Stderr
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.cmd.Process.Kill() })
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			kind, rest, _ := strings.Cut(sc.Text(), " ")
			w.mu.Lock()
			switch kind {
			case "ack":
				w.acked, _ = strconv.Atoi(rest)
				w.ackedAt[w.acked] = time.Now()
			case "fail":
				w.failures = append(w.failures, rest)
			}
			w.cond.Broadcast()
			w.mu.Unlock()
		}
		w.mu.Lock()
		w.failures = append(w.failures, "exited")
		w.cond.Broadcast()
		w.mu.Unlock()
	}()
	return w
}

func (w *workload) acks() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked
}

// waitAcks waits until the workload has done n rounds, at most a minute.
func (w *workload) waitAcks(t *testing.T, n int) {
	t.Helper()
	timer := time.AfterFunc(time.Minute, func() {
		w.mu.Lock()
		w.failures = append(w.failures, "timeout")
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.acked < n {
		if slices.Contains(w.failures, "timeout") || slices.Contains(w.failures, "exited") {
			t.Fatalf("%s did not reach %d rounds (at %d): %q", w.cmd.Env[len(w.cmd.Env)-2], n, w.acked, w.failures)
		}
		w.cond.Wait()
	}
}

// stop tells the workload to finish (close its standard input) and
// waits for it.
func (w *workload) stop(t *testing.T) {
	t.Helper()
	w.stdin.Close()
	select {
	case <-w.done:
	case <-time.After(time.Minute):
		t.Fatal("a workload did not stop within a minute")
	}
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("workload: %v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures = slices.DeleteFunc(w.failures, func(s string) bool { return s == "exited" })
}

// runRole runs the test binary as a workload when TestMain says so, and
// reports whether it did.
func runRole() bool {
	file := os.Getenv("OBJFUSE_TEST_FILE")
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	switch os.Getenv(roleEnv) {
	case "writer":
		writer(file, stop)
	case "reader":
		reader(file, stop)
	default:
		return false
	}
	return true
}

// writer appends counted lines, fsyncing each ("ack N": lines 0..N-1
// are in S3), all through the descriptor it opened first. A failed call
// is reported, and the lines since the last fsync are written again.
func writer(file string, stop chan struct{}) {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Printf("fail open: %v\n", err)
		return
	}
	next := 0
	for {
		select {
		case <-stop:
			if err := f.Close(); err != nil {
				fmt.Printf("fail close: %v\n", err)
			}
			return
		default:
		}
		if _, err := f.WriteString(strconv.Itoa(next) + "\n"); err != nil {
			next = failed(fmt.Sprintf("write %d", next), err, file)
			continue
		}
		if err := f.Sync(); err != nil {
			next = failed(fmt.Sprintf("fsync %d", next), err, file)
			continue
		}
		next++
		fmt.Printf("ack %d\n", next)
		if os.Getenv("OBJFUSE_TEST_NO_PAUSE") == "" {
			<-time.After(20 * time.Millisecond) // a writer that pauses: fsynced, then nothing in flight
		}
	}
}

// failed reports a failed call and returns the line to go on from:
// after a failed fsync the line may or may not be stored (its upload may
// have ended as its mounter died), so the writer reads what the file
// holds, as a careful writer does.
func failed(op string, err error, file string) int {
	fmt.Printf("fail %s: %v\n", op, err)
	b, err := os.ReadFile(file)
	if err != nil {
		fmt.Printf("fail read after a failure: %v\n", err)
		os.Exit(1)
	}
	next, _, ok := countedLines(string(b))
	if !ok || len(b) > 0 && b[len(b)-1] != '\n' {
		fmt.Printf("fail content after a failure: %s\n", linesMismatch(string(b)))
		os.Exit(1)
	}
	return next
}

// reader reads the file through a handle opened once, from the start,
// round after round ("ack N" after N rounds), and checks each read holds
// whole counted lines; every tenth round it opens the file anew too.
func reader(file string, stop chan struct{}) {
	f, err := os.Open(file)
	if err != nil {
		fmt.Printf("fail open: %v\n", err)
		return
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for round := 1; ; round++ {
		select {
		case <-stop:
			return
		default:
		}
		n, err := f.ReadAt(buf, 0)
		if err != nil && err != io.EOF {
			fmt.Printf("fail read: %v\n", err)
		} else if _, _, ok := countedLines(string(buf[:n])); !ok {
			fmt.Printf("fail content: %s\n", linesMismatch(string(buf[:n])))
		}
		if round%10 == 0 {
			if b, err := os.ReadFile(file); err != nil {
				fmt.Printf("fail reopen: %v\n", err)
			} else if _, _, ok := countedLines(string(b)); !ok {
				fmt.Printf("fail content: %s\n", linesMismatch(string(b)))
			}
		}
		fmt.Printf("ack %d\n", round)
		<-time.After(5 * time.Millisecond)
	}
}

// countedLines checks s is "0\n1\n2\n..." (a last line cut short by a
// write under way aside) and returns the number after its last line. A
// number may come twice in a row: the writer writes a line again after a
// failed fsync when its first copy was stored nonetheless (an upload that
// ended as its mounter died), a line it was never told was stored;
// repeated lists those.
func countedLines(s string) (next int, repeated []int, ok bool) {
	lines := strings.Split(s, "\n")
	lines = lines[:len(lines)-1] // after the last newline: nothing, or a line being written
	for _, l := range lines {
		switch l {
		case strconv.Itoa(next):
			next++
		case strconv.Itoa(next - 1):
			repeated = append(repeated, next-1)
		default:
			return next, repeated, false
		}
	}
	return next, repeated, true
}

// linesMismatch shows where s stops being counted lines.
func linesMismatch(s string) string {
	at := 0
	for _, l := range strings.SplitAfter(s, "\n") {
		if _, _, ok := countedLines(s[:at+len(l)]); !ok {
			break
		}
		at += len(l)
	}
	return fmt.Sprintf("at byte %d: %q", at, s[max(0, at-20):min(len(s), at+40)])
}

// TestPlannedHandOver: the mounter is told to hand over (handoff.OpHandOver,
// as for an upgrade) again and again while a writer writes and fsyncs
// without pause and a reader reads: it holds new requests, uploads what was
// written and exits; the successor takes over. Not one call fails, and S3
// holds every line once.
func TestPlannedHandOver(t *testing.T) {
	const handOvers = 10
	srv, staging, m, fd := servedMount(t)
	file := filepath.Join(m.mnt, "log")
	w := startWorkload(t, "writer", file, "OBJFUSE_TEST_NO_PAUSE=1")
	w.waitAcks(t, 1)
	r := startWorkload(t, "reader", file)
	r.waitAcks(t, 1)
	var stalls []time.Duration
	for i := range handOvers {
		<-time.After(time.Duration(50+rand.IntN(250)) * time.Millisecond)
		acked := w.acks()
		start := time.Now()
		if _, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpHandOver}, -1); err != nil {
			t.Fatalf("hand-over %d: %v", i+1, err)
		}
		if err := <-m.exited; err == nil {
			t.Fatalf("hand-over %d: the mounter exited 0; its container would not restart", i+1)
		}
		m = restartHandoff(t, m, srv, "--staging-dir", staging)
		hand(t, m.sock, fd, true)
		w.waitAcks(t, acked+1)
		stalls = append(stalls, time.Since(start))
	}
	w.stop(t)
	r.stop(t)
	m.release(t)
	slices.Sort(stalls)
	t.Logf("%d hand-overs: stall until the writer's next fsync: p50 %v, max %v", handOvers,
		stalls[len(stalls)/2].Round(time.Millisecond), stalls[len(stalls)-1].Round(time.Millisecond))
	if len(w.failures)+len(r.failures) > 0 {
		t.Errorf("failed calls: writer %q, reader %q", w.failures, r.failures)
	}
	body := storedObject(t, srv, m.bucket, "log")
	if n, repeated, ok := countedLines(string(body)); !ok || len(repeated) > 0 || n < w.acks() {
		t.Errorf("S3 holds %d counted lines (repeated %v, ok=%v), want the %d fsynced, each once: %s", n, repeated, ok, w.acks(), linesMismatch(string(body)))
	}
}

// TestTakeoverSeesNamesChangedMeanwhile: while no mounter serves, another
// client replaces a file the kernel has cached (for a minute: --stat-ttl)
// by a directory of the same name. The successor of a mounter that died
// has the kernel look every cached name up again (FUSE_NOTIFY_INC_EPOCH):
// the name is a directory at once, not the file until its entry expires.
func TestTakeoverSeesNamesChangedMeanwhile(t *testing.T) {
	ttl := []string{"--stat-ttl", "1m"}
	srv, staging, m, fd := servedMount(t, ttl...)
	put := func(key string) {
		if _, err := srv.Client().PutObject(context.Background(), m.bucket, key, strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put("swap")
	name := filepath.Join(m.mnt, "swap")
	if fi, err := os.Lstat(name); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("before: %v, %v; want a file", fi, err)
	}
	m.cmd.Process.Kill()
	<-m.exited
	if err := srv.Client().RemoveObject(context.Background(), m.bucket, "swap", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	put("swap/inner")
	m = restartHandoff(t, m, srv, append([]string{"--staging-dir", staging}, ttl...)...)
	hand(t, m.sock, fd, true)
	fi, err := os.Lstat(name)
	if err != nil || !fi.IsDir() {
		t.Fatalf("after the takeover: %v, %v; want the directory now there", fi, err)
	}
	if _, err := os.Stat(filepath.Join(name, "inner")); err != nil {
		t.Error(err)
	}
	m.release(t)
}

// TestTakeoverRefusesOtherFUSETerms: a successor whose INIT reply would
// differ from the one the kernel keeps (here the saved one is made to
// say another maximum write, as an upgrade that changed it would) does
// not serve the connection: it says why, and the node repairs instead.
func TestTakeoverRefusesOtherFUSETerms(t *testing.T) {
	srv, staging, m, fd := servedMount(t)
	m.cmd.Process.Kill()
	<-m.exited
	editSavedReply(t, staging, func(saved map[string]any) {
		saved["MaxWrite"] = saved["MaxWrite"].(float64) / 2
	})
	m = restartHandoff(t, m, srv, "--staging-dir", staging)
	dup, err := syscall.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpServe, TakeOver: true}, dup)
	syscall.Close(dup)
	if err == nil && rep.Serving {
		t.Fatal("a successor with other FUSE terms serves the connection")
	}
	if msg := fmt.Sprint(err, rep.Error); !strings.Contains(msg, "FUSE terms differ") {
		t.Fatalf("refused with %q, want it to say the FUSE terms differ", msg)
	}
}

// TestTakeoverOfAMounterThatAskedForAutoInvalData: objfuse before this
// one asked the kernel for AUTO_INVAL_DATA; a successor that does not
// still takes its connection over (the kernel goes on invalidating as
// before, which nothing here relies on either way), and serves it.
func TestTakeoverOfAMounterThatAskedForAutoInvalData(t *testing.T) {
	srv, staging, m, fd := servedMount(t)
	name := filepath.Join(m.mnt, "kept")
	if err := os.WriteFile(name, []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.cmd.Process.Kill()
	<-m.exited
	editSavedReply(t, staging, func(saved map[string]any) {
		saved["Flags"] = float64(uint32(saved["Flags"].(float64)) | fuse.CAP_AUTO_INVAL_DATA)
	})
	m = restartHandoff(t, m, srv, "--staging-dir", staging)
	hand(t, m.sock, fd, true)
	if got, err := os.ReadFile(name); err != nil || string(got) != "before" {
		t.Fatalf("after the takeover: %q, %v; want the file as written", got, err)
	}
	m.release(t)
}

// editSavedReply has edit change the INIT reply a killed mounter saved
// under staging, as a predecessor of another version would have saved it.
func editSavedReply(t *testing.T, staging string, edit func(saved map[string]any)) {
	t.Helper()
	var reply string
	filepath.WalkDir(staging, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "init-reply.json" {
			reply = p
		}
		return nil
	})
	body, err := os.ReadFile(reply)
	if err != nil {
		t.Fatalf("the mounter saved no INIT reply: %v", err)
	}
	var saved map[string]any
	if err := json.Unmarshal(body, &saved); err != nil {
		t.Fatal(err)
	}
	edit(saved)
	if body, err = json.Marshal(saved); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(reply, body, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestNoHandOverWithoutAKeptConnection: a mounter served by a node
// plugin that keeps no copy of the connection refuses to hand over, now
// or at a signal: exiting would end the connection.
func TestNoHandOverWithoutAKeptConnection(t *testing.T) {
	srv := miniotest.Start(t)
	m := startHandoff(t, srv, "--staging-dir", t.TempDir())
	m.serve(t) // as a node plugin run with --mount-takeover=false
	for _, atSignal := range []bool{true, false} {
		rep, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpHandOver, AtSignal: atSignal}, -1)
		if err == nil || !strings.Contains(rep.Error, "keeps no copy of the connection") {
			t.Fatalf("hand over (at signal %v) without a kept connection: %+v, %v; want a refusal saying why", atSignal, rep, err)
		}
	}
	if rep, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpStatus}, -1); err != nil || !rep.Serving {
		t.Fatalf("after the refusals the mounter does not serve: %+v, %v", rep, err)
	}
	m.release(t)
}

// TestHandOverSeesAFileReplacedMeanwhile: the kernel has a file's pages
// and attributes (for a minute: --stat-ttl); while the connection is
// handed over, another client replaces the file by one of the same size
// and another mtime. A read through the successor is the new content,
// not the kernel's old pages: the successor's first open of the file
// has the kernel drop them.
func TestHandOverSeesAFileReplacedMeanwhile(t *testing.T) {
	ttl := []string{"--stat-ttl", "1m"}
	srv, staging, m, fd := servedMount(t, ttl...)
	put := putWithMtime(t, srv, m.bucket, "same")
	put("old content\n", "1000000000")
	name := filepath.Join(m.mnt, "same")
	if b, err := os.ReadFile(name); err != nil || string(b) != "old content\n" {
		t.Fatalf("before: %q, %v", b, err)
	}
	if _, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpHandOver}, -1); err != nil {
		t.Fatal(err)
	}
	<-m.exited
	put("new content\n", "2000000000")
	m = restartHandoff(t, m, srv, append([]string{"--staging-dir", staging}, ttl...)...)
	hand(t, m.sock, fd, true)
	// open(2) and read(2) only: no stat to have the kernel ask for the
	// attributes by itself.
	if b, err := openAndRead(name); err != nil || string(b) != "new content\n" {
		t.Fatalf("after the hand-over: %q, %v; want the content now in S3", b, err)
	}
	m.release(t)
}

// TestARevivedHandleLeavesNoOldPagesToNewOpens: a file open across a
// hand-over, whose pages the kernel has, is replaced meanwhile by a
// longer version. The successor opens the handle again when the kernel
// first uses it (takeover.FS), an open the kernel never sees; an open
// after that must still not keep the old pages, nor the old size: it
// reads the new version whole.
func TestARevivedHandleLeavesNoOldPagesToNewOpens(t *testing.T) {
	ttl := []string{"--stat-ttl", "1m"}
	srv, staging, m, fd := servedMount(t, ttl...)
	put := putWithMtime(t, srv, m.bucket, "kept")
	put("old content\n", "1000000000")
	name := filepath.Join(m.mnt, "kept")
	old, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if b, err := io.ReadAll(old); err != nil || string(b) != "old content\n" {
		t.Fatalf("before: %q, %v", b, err)
	}
	if _, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpHandOver}, -1); err != nil {
		t.Fatal(err)
	}
	<-m.exited
	put("new and longer content\n", "2000000000")
	m = restartHandoff(t, m, srv, append([]string{"--staging-dir", staging}, ttl...)...)
	hand(t, m.sock, fd, true)
	// A request on the old handle (its reads are the kernel's pages):
	// the successor opens it again.
	if err := old.Sync(); err != nil {
		t.Fatalf("fsync of the handle open across the hand-over: %v", err)
	}
	if b, err := openAndRead(name); err != nil || string(b) != "new and longer content\n" {
		t.Fatalf("a new open after the old handle's revival read %q, %v; want the content now in S3", b, err)
	}
	old.Close()
	m.release(t)
}

// putWithMtime puts key in bucket, as another S3 client would, with
// body and objfuse's mtime metadata.
func putWithMtime(t *testing.T, srv *miniotest.Server, bucket, key string) func(body, mtime string) {
	return func(body, mtime string) {
		t.Helper()
		if _, err := srv.Client().PutObject(context.Background(), bucket, key, strings.NewReader(body), int64(len(body)),
			minio.PutObjectOptions{UserMetadata: map[string]string{"mtime": mtime}}); err != nil {
			t.Fatal(err)
		}
	}
}

// openAndRead reads up to 4 KiB of name with open(2) and read(2) alone.
func openAndRead(name string) ([]byte, error) {
	f, err := syscall.Open(name, syscall.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(f)
	buf := make([]byte, 4096)
	n, err := syscall.Read(f, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}
