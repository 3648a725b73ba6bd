package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
	"github.com/objfuse/objfuse/test/miniotest"
)

var binary string

// buildFlags build binary: with -race when the tests run with it.
var buildFlags []string

func TestMain(m *testing.M) {
	if runRole() {
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "objfuse-mount-test-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "objfuse-mount")
	if out, err := exec.Command("go", slices.Concat([]string{"build"}, buildFlags, []string{"-o", binary, "."})...).CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestBadInput: every mistake exits non-zero within seconds with a
// one-line reason naming the cause.
func TestBadInput(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	wrong := t.TempDir()
	os.WriteFile(filepath.Join(wrong, "accessKeyID"), []byte("nobody"), 0o600)
	os.WriteFile(filepath.Join(wrong, "secretAccessKey"), []byte("wrong-secret"), 0o600)
	badSecret := t.TempDir()
	os.WriteFile(filepath.Join(badSecret, "accessKeyID"), []byte(miniotest.AccessKey), 0o600)
	os.WriteFile(filepath.Join(badSecret, "secretAccessKey"), []byte("wrong-secret"), 0o600)
	mnt := t.TempDir()
	cases := []struct {
		name     string
		args     []string
		code     int
		mentions string
	}{
		{"unknown flag", []string{"--no-such-flag", bucket, mnt}, 2, "flag provided but not defined"},
		{"missing mountpoint", []string{bucket}, 2, "want 2 arguments"},
		{"bad file mode", []string{"--file-mode", "rw", bucket, mnt}, 2, "-file-mode: want octal permissions"},
		{"bad readahead", []string{"--readahead-kib", "0", bucket, mnt}, 2, "--readahead-kib"},
		{"no drain timeout", []string{"--drain-timeout", "0s", bucket, mnt}, 2, "--drain-timeout"},
		{"writeback cache taken over", []string{"--handoff", filepath.Join(mnt, "sock"), "--writeback-cache", bucket}, 2, "needs --no-takeover"},
		{"negative read cache", []string{"--read-cache-mib", "-1", bucket, mnt}, 2, "-read-cache-mib: want a whole number from 0"},
		{"small part size", []string{"--part-size-mib", "1", bucket, mnt}, 2, "-part-size-mib: want a whole number from 5"},
		{"mountpoint missing", []string{bucket, filepath.Join(mnt, "nope")}, 2, "no such file or directory"},
		{"unknown access key", []string{"--endpoint", srv.Endpoint, "--path-style", "--credentials-dir", wrong, bucket, mnt}, 1, "InvalidAccessKeyId"},
		{"wrong secret", []string{"--endpoint", srv.Endpoint, "--path-style", "--credentials-dir", badSecret, bucket, mnt}, 1, "SignatureDoesNotMatch"},
		{"missing credentials dir", []string{"--endpoint", srv.Endpoint, "--credentials-dir", filepath.Join(wrong, "nope"), bucket, mnt}, 1, "credentials"},
		{"unknown bucket", []string{"--endpoint", srv.Endpoint, "--path-style", "--credentials-dir", srv.CredsDir, "no-such-bucket", mnt}, 1, `bucket "no-such-bucket" does not exist`},
		{"bad bucket name", []string{"--endpoint", srv.Endpoint, "--path-style", "--credentials-dir", srv.CredsDir, "b1", mnt}, 1, `bucket name "b1" is not valid: Bucket name cannot be shorter than 3 characters`},
		{"unreachable endpoint", []string{"--endpoint", "http://127.0.0.1:1", "--credentials-dir", srv.CredsDir, bucket, mnt}, 1, "cannot reach S3 endpoint"},
		{"bad endpoint", []string{"--endpoint", "ftp://x", "--credentials-dir", srv.CredsDir, bucket, mnt}, 1, "scheme must be http or https"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			out, err := exec.Command(binary, append([]string{"--foreground"}, c.args...)...).CombinedOutput()
			took := time.Since(start)
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			last := lastLine(string(out))
			if code != c.code || !strings.Contains(last, c.mentions) {
				t.Fatalf("exit %d, last line %q; want exit %d mentioning %q\n%s", code, last, c.code, c.mentions, out)
			}
			if took > 15*time.Second {
				t.Fatalf("took %v to fail", took)
			}
			if mounted(mnt) {
				t.Fatal("mounted anyway")
			}
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func mounted(dir string) bool {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// TestMountAndSignal mounts by hand, writes, and on SIGTERM uploads the
// file still open for writing, unmounts and exits 0.
func TestMountAndSignal(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	mnt, cacheDir := t.TempDir(), t.TempDir()
	cmd := exec.Command(binary, "--foreground", "--endpoint", srv.Endpoint, "--path-style",
		"--credentials-dir", srv.CredsDir, "--readahead-kib", "2048",
		"--read-cache-mib", "16", "--read-cache-dir", cacheDir, bucket+"/some/prefix", mnt)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); syscall.Unmount(mnt, syscall.MNT_DETACH) })
	waitFor(t, "the mount", func() bool { return mounted(mnt) })
	if entries, _ := os.ReadDir(cacheDir); len(entries) != 1 {
		t.Fatalf("read cache directory holds %d entries, want the cache's own directory", len(entries))
	}
	// Linux gives every FUSE mount 128 KiB; objfuse-mount raises it.
	waitFor(t, "readahead of 2048 KiB", func() bool {
		kib, _ := mounts.Readahead(mnt)
		return kib == 2048
	})
	if err := os.WriteFile(filepath.Join(mnt, "closed.txt"), []byte("closed"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(mnt, "open.txt"))
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("still open at SIGTERM")
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	f.Close()
	if mounted(mnt) {
		t.Fatal("still mounted after exit")
	}
	if entries, _ := os.ReadDir(cacheDir); len(entries) != 0 {
		t.Fatalf("the read cache's files outlived the mount: %v", entries)
	}
	c := srv.Client()
	for key, want := range map[string]string{"some/prefix/closed.txt": "closed", "some/prefix/open.txt": "still open at SIGTERM"} {
		obj, err := c.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 100)
		n, _ := obj.Read(b)
		if string(b[:n]) != want {
			t.Fatalf("%s holds %q, want %q", key, b[:n], want)
		}
	}
}

// TestDetach: without --foreground it returns once mounted, like s3fs.
func TestDetach(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	mnt := t.TempDir()
	out, err := exec.Command(binary, "--endpoint", srv.Endpoint, "--path-style", "--credentials-dir", srv.CredsDir, bucket, mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !mounted(mnt) {
		t.Fatal("returned before mounting")
	}
	if err := os.WriteFile(filepath.Join(mnt, "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Unmounting from outside ends the daemon.
	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
}

// TestHandoff runs the mounter pod's protocol: a privileged caller mounts
// /dev/fuse and hands the handle over; the mounter serves it.
// handoffMounter is objfuse-mount in mounter pod mode, as a test runs it.
type handoffMounter struct {
	cmd       *exec.Cmd
	sock, mnt string
	bucket    string
	exited    chan error
	// stderr has what the mounter (and its successors) logged, and
	// passes it on to the test's.
	stderr *logBuffer
}

// logBuffer keeps what is written to it and copies it to os.Stderr.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.buf.Write(p)
	b.mu.Unlock()
	return os.Stderr.Write(p)
}

// logs is what the mounter and its successors logged.
func (m *handoffMounter) logs() string {
	m.stderr.mu.Lock()
	defer m.stderr.mu.Unlock()
	return m.stderr.buf.String()
}

// startHandoff starts a mounter for srv's bucket and waits for its socket.
func startHandoff(t *testing.T, srv *miniotest.Server, flags ...string) *handoffMounter {
	dir := t.TempDir()
	m := &handoffMounter{sock: filepath.Join(dir, handoff.SocketName), mnt: filepath.Join(dir, handoff.MountDirName), bucket: srv.Bucket(), exited: make(chan error, 1), stderr: &logBuffer{}}
	os.Mkdir(m.mnt, 0o755)
	args := append([]string{"--handoff", m.sock, "--endpoint", srv.Endpoint, "--path-style", "--credentials-dir", srv.CredsDir}, flags...)
	m.cmd = exec.Command(binary, append(args, m.bucket)...)
	m.cmd.Stderr = m.stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.exited <- m.cmd.Wait() }()
	t.Cleanup(func() { m.cmd.Process.Kill(); syscall.Unmount(m.mnt, syscall.MNT_DETACH) })
	waitFor(t, "the socket", func() bool {
		return exec.Command(binary, "--probe", m.sock).Run() == nil
	})
	return m
}

// serve mounts FUSE at m.mnt and hands the handle over, as NodeStage does.
func (m *handoffMounter) serve(t *testing.T) {
	fd, err := (mounts.System{}).MountFUSE(m.mnt, "objfuse:"+m.bucket, false)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpServe}, fd)
	syscall.Close(fd)
	if err != nil || !rep.Serving {
		t.Fatalf("serve: %+v %v", rep, err)
	}
}

// release uploads and lets the mount go, as NodeUnstage does.
func (m *handoffMounter) release(t *testing.T) {
	if _, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpExit}, -1); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := syscall.Unmount(m.mnt, 0); err != nil {
		t.Fatal(err)
	}
}

// exit waits for the mounter to exit by itself and returns its error.
func (m *handoffMounter) exit(t *testing.T, within time.Duration) error {
	select {
	case err := <-m.exited:
		return err
	case <-time.After(within):
		t.Fatalf("mounter did not exit within %v", within)
		return nil
	}
}

func TestHandoff(t *testing.T) {
	srv := miniotest.Start(t)
	m := startHandoff(t, srv)
	sock, mnt := m.sock, m.mnt
	ctx := context.Background()
	m.serve(t)
	if err := os.WriteFile(filepath.Join(mnt, "through-handoff"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "through-handoff")); err != nil || string(b) != "ok" {
		t.Fatalf("read back: %q %v", b, err)
	}
	// A second handle is refused while the first is served.
	if _, err := handoff.Call(ctx, sock, handoff.Request{Op: handoff.OpServe}, -1); err == nil {
		t.Fatal("serve without a handle accepted")
	}
	// As NodeUnstage does: release (after uploading), then unmount. The
	// mounter then waits for a new handle, as for a pod staged again on
	// this node, and serves it with the data still there.
	m.release(t)
	waitFor(t, "the mounter to wait for a new handle", func() bool {
		rep, err := handoff.Call(ctx, sock, handoff.Request{Op: handoff.OpStatus}, -1)
		return err == nil && !rep.Serving
	})
	m.serve(t)
	if b, err := os.ReadFile(filepath.Join(mnt, "through-handoff")); err != nil || string(b) != "ok" {
		t.Fatalf("read back after re-serving: %q %v", b, err)
	}
	m.release(t)
	// Its pod deleted (SIGTERM) while not serving: a clean exit.
	waitFor(t, "the mounter to be released", func() bool {
		rep, err := handoff.Call(ctx, sock, handoff.Request{Op: handoff.OpStatus}, -1)
		return err == nil && !rep.Serving
	})
	m.cmd.Process.Signal(syscall.SIGTERM)
	if err := m.exit(t, 20*time.Second); err != nil {
		t.Fatalf("mounter exit: %v", err)
	}
}

// An inline volume's mounter (--exit-when-released) exits 0 once the node
// releases it, after uploading what its pod wrote with --async-close:
// its pod is done, and the controller deletes a mounter that exited.
func TestHandoffExitWhenReleased(t *testing.T) {
	srv := miniotest.Start(t)
	m := startHandoff(t, srv, "--exit-when-released", "--async-close")
	m.serve(t)
	if err := os.WriteFile(filepath.Join(m.mnt, "last-words"), []byte("uploaded before the exit"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.release(t)
	if err := m.exit(t, 20*time.Second); err != nil {
		t.Fatalf("mounter exit: %v\n%s", err, m.logs())
	}
	obj, err := srv.Client().GetObject(context.Background(), m.bucket, "last-words", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if got, err := io.ReadAll(obj); err != nil || string(got) != "uploaded before the exit" {
		t.Fatalf("after the exit the object holds %q (%v)", got, err)
	}
}

// TestHandoffSignalWhileServing: the mounter pod is deleted while a pod
// still uses the volume. The mounter keeps serving, closes wait for their
// upload from then on (with --async-close too), and once NodeUnstage
// releases it, it exits rather than waiting for a handle that will not come.
func TestHandoffSignalWhileServing(t *testing.T) {
	srv := miniotest.Start(t)
	m := startHandoff(t, srv, "--async-close")
	m.serve(t)
	m.cmd.Process.Signal(syscall.SIGTERM)
	m.waitStopping(t)
	if err := os.WriteFile(filepath.Join(m.mnt, "after-signal"), []byte("kept"), 0o644); err != nil {
		t.Fatalf("write after the signal: %v", err)
	}
	// No waiting: the close returned once the object was stored.
	got, err := srv.Client().GetObject(context.Background(), m.bucket, "after-signal", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if b, err := io.ReadAll(got); err != nil || string(b) != "kept" {
		t.Fatalf("after-signal in S3 when its close returned: %q %v", b, err)
	}
	m.release(t)
	if err := m.exit(t, 20*time.Second); err != nil {
		t.Fatalf("mounter exit after release: %v", err)
	}
}

// waitStopping waits until the mounter says it handled its signal.
func (m *handoffMounter) waitStopping(t *testing.T) {
	waitFor(t, "the mounter to be stopping", func() bool {
		rep, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpStatus}, -1)
		return err == nil && rep.Stopping
	})
}

// TestHandoffSignalDuringAnOutage: deleted during an S3 outage, a mounter
// cannot upload what was closed asynchronously. At its drain timeout it
// reports those files lost, by name, where the node plugin asks (before
// the kubelet kills it: the Event it tells lists them), and goes on
// serving until released.
func TestHandoffSignalDuringAnOutage(t *testing.T) {
	srv := miniotest.Start(t)
	m := startHandoff(t, srv, "--async-close", "--drain-timeout=2s")
	m.serve(t)
	names := []string{"pending-1", "pending-2", "pending-3"}
	var open []*os.File
	for _, name := range names {
		h, err := os.Create(filepath.Join(m.mnt, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Write([]byte("not yet in S3")); err != nil {
			t.Fatal(err)
		}
		open = append(open, h)
	}
	srv.Stop()
	for _, h := range open {
		if err := h.Close(); err != nil {
			t.Fatalf("asynchronous close: %v", err)
		}
	}
	rep, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpStatus}, -1)
	if err != nil || rep.Health == nil || rep.Health.PendingUploads != 3 || !slices.Equal(rep.Health.PendingFiles, names) {
		t.Fatalf("status with three files closed during the outage: %+v %v, want them pending", rep.Health, err)
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	m.waitStopping(t)
	if err := os.WriteFile(filepath.Join(m.mnt, "late"), []byte("x"), 0o644); err == nil {
		t.Fatal("a close after the signal returned before its upload, with S3 down")
	}
	var lost *handoff.Health
	waitFor(t, "the upload reported lost", func() bool {
		rep, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpStatus}, -1)
		if err == nil && rep.Health != nil && rep.Health.LostUploads > 0 {
			lost = rep.Health
		}
		return lost != nil
	})
	waitFor(t, "every upload reported lost", func() bool {
		rep, err := handoff.Call(context.Background(), m.sock, handoff.Request{Op: handoff.OpStatus}, -1)
		if err == nil && rep.Health != nil {
			lost = rep.Health
		}
		return lost.LostUploads >= 3
	})
	slices.Sort(lost.LostFiles)
	if lost.LostUploads != 3 || !slices.Equal(lost.LostFiles, names) || !strings.Contains(lost.LastLostUpload, "told to stop") {
		t.Fatalf("lost uploads %+v, want exactly the three files, naming the stop", lost)
	}
	srv.Restart()
	if err := os.WriteFile(filepath.Join(m.mnt, "after-deadline"), []byte("x"), 0o644); err != nil {
		t.Fatalf("write after the drain deadline, S3 back: %v", err)
	}
	m.release(t)
	if err := m.exit(t, 20*time.Second); err != nil {
		t.Fatalf("mounter exit after release: %v", err)
	}
	if _, err := srv.Client().StatObject(context.Background(), m.bucket, "after-deadline", minio.StatObjectOptions{}); err != nil {
		t.Fatalf("after-deadline in S3: %v", err)
	}
}

// TestByHandMountChecksPermissions: a mount made by hand as root is open
// to every local user (allow_other), so the kernel must check the files'
// modes: another user can neither read nor delete root's 0600 file.
func TestByHandMountChecksPermissions(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	mnt := t.TempDir()
	// t.TempDir's directories are 0700: let the other user reach mnt.
	for _, d := range []string{mnt, filepath.Dir(mnt)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(binary, "--endpoint", srv.Endpoint, "--path-style", "--credentials-dir", srv.CredsDir, bucket, mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	secret := filepath.Join(mnt, "secret")
	if err := os.WriteFile(secret, []byte("root's only"), 0o600); err != nil {
		t.Fatal(err)
	}
	asNobody := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := asNobody("cat", secret); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("another user reads root's 0600 file: %v, %q", err, out)
	}
	if out, err := asNobody("rm", "-f", secret); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("another user deletes root's file in root's 0755 directory: %v, %q", err, out)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "root's only" {
		t.Fatalf("root reads %q, %v", b, err)
	}
	if out, err := asNobody("ls", mnt); err != nil || !strings.Contains(out, "secret") {
		t.Fatalf("another user lists the 0755 root directory: %v, %q", err, out)
	}
}
