package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/test/miniotest"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "objfuse-mount-test-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "objfuse-mount")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
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
		{"bad file mode", []string{"--file-mode", "rw", bucket, mnt}, 2, "--file-mode"},
		{"bad readahead", []string{"--readahead-kib", "0", bucket, mnt}, 2, "--readahead-kib"},
		{"negative read cache", []string{"--read-cache-mib", "-1", bucket, mnt}, 2, "--read-cache-mib"},
		{"small part size", []string{"--part-size-mib", "1", bucket, mnt}, 2, "below S3's 5 MiB minimum"},
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
		time.Sleep(20 * time.Millisecond)
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
		kib, _ := handoff.Readahead(mnt)
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
func TestHandoff(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	dir := t.TempDir()
	sock := filepath.Join(dir, handoff.SocketName)
	mnt := filepath.Join(dir, handoff.MountDirName)
	os.Mkdir(mnt, 0o755)
	cmd := exec.Command(binary, "--handoff", sock, "--endpoint", srv.Endpoint, "--path-style", "--credentials-dir", srv.CredsDir, bucket)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); syscall.Unmount(mnt, syscall.MNT_DETACH) })
	ctx := context.Background()
	waitFor(t, "the socket", func() bool {
		return exec.Command(binary, "--probe", sock).Run() == nil
	})
	fd, err := handoff.MountFUSE(mnt, "objfuse:"+bucket, false)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := handoff.Call(ctx, sock, handoff.Request{Op: handoff.OpServe}, fd)
	syscall.Close(fd)
	if err != nil || !rep.Serving {
		t.Fatalf("serve: %+v %v", rep, err)
	}
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
	if _, err := handoff.Call(ctx, sock, handoff.Request{Op: handoff.OpExit}, -1); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the mounter to wait for a new handle", func() bool {
		rep, err := handoff.Call(ctx, sock, handoff.Request{Op: handoff.OpStatus}, -1)
		return err == nil && !rep.Serving
	})
	fd, err = handoff.MountFUSE(mnt, "objfuse:"+bucket, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = handoff.Call(ctx, sock, handoff.Request{Op: handoff.OpServe}, fd)
	syscall.Close(fd)
	if err != nil {
		t.Fatalf("serve again: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "through-handoff")); err != nil || string(b) != "ok" {
		t.Fatalf("read back after re-serving: %q %v", b, err)
	}
	if _, err := handoff.Call(ctx, sock, handoff.Request{Op: handoff.OpExit}, -1); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	// Its pod deleted (SIGTERM) while not serving: a clean exit.
	waitFor(t, "the mounter to be released", func() bool {
		rep, err := handoff.Call(ctx, sock, handoff.Request{Op: handoff.OpStatus}, -1)
		return err == nil && !rep.Serving
	})
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("mounter exit: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("mounter did not exit")
	}
}
