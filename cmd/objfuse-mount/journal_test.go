package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/localserver"
	"github.com/objfuse/objfuse/test/miniotest"
)

// journaledFiles is how many files the killed mounter acknowledged.
const journaledFiles = 500

// TestAKilledMounterLosesNoAsynchronousClose: a mounter with --async-close
// acknowledges 500 closes while a slow endpoint holds every upload back,
// and is SIGKILLed. Started again on the same staging directory, it shows
// the files with their content at once and uploads all of them; the
// pending-uploads metric goes from 500 to 0. (A file is not read while
// its upload is held back: a lookup waits for the upload under way.)
func TestAKilledMounterLosesNoAsynchronousClose(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	var holding atomic.Bool
	front := srv.HoldingFront(t, func(r *http.Request) bool {
		return holding.Load() && (r.Method == http.MethodPut || r.Method == http.MethodPost)
	})
	staging := t.TempDir()
	mnt := t.TempDir()

	first := startJournaling(t, front.Config, bucket, mnt, staging)
	holding.Store(true)
	for i := range journaledFiles {
		if err := os.WriteFile(filepath.Join(mnt, journaledName(i)), journaledContent(i), 0o644); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
	}
	waitForMetric(t, first.metrics, "objfuse_pending_uploads", journaledFiles)
	waitFor(t, "an upload held back", func() bool { return front.Held() > 0 })
	first.cmd.Process.Kill()
	first.cmd.Wait()
	syscall.Unmount(mnt, syscall.MNT_DETACH)
	if n := countObjects(t, srv, bucket); n != 0 {
		t.Fatalf("%d objects reached S3 before the kill: the uploads were not held back", n)
	}

	second := startJournaling(t, front.Config, bucket, mnt, staging)
	waitForMetric(t, second.metrics, "objfuse_pending_uploads", journaledFiles)
	front.Release()
	waitForMetric(t, second.metrics, "objfuse_pending_uploads", 0)
	c := srv.Client()
	for i := range journaledFiles {
		obj, err := c.GetObject(context.Background(), bucket, journaledName(i), minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(obj)
		obj.Close()
		if err != nil || !bytes.Equal(got, journaledContent(i)) {
			t.Fatalf("%s in S3: %d bytes, %v; want its %d bytes", journaledName(i), len(got), err, len(journaledContent(i)))
		}
	}
	for _, i := range []int{0, 7, journaledFiles - 1} {
		got, err := os.ReadFile(filepath.Join(mnt, journaledName(i)))
		if err != nil || !bytes.Equal(got, journaledContent(i)) {
			t.Fatalf("%s read through the restarted mount: %d bytes, %v; want its %d bytes", journaledName(i), len(got), err, len(journaledContent(i)))
		}
	}
	entries, _ := os.ReadDir(staging)
	entries = slices.DeleteFunc(entries, func(e os.DirEntry) bool {
		return strings.HasPrefix(e.Name(), "objfuse-read-cache-") // the live mount's, on by default
	})
	if len(entries) != 1 {
		t.Fatalf("staging directory holds %v, want only the journal's directory and the read cache's", entries)
	}
	journal, _ := filepath.Glob(filepath.Join(staging, "objfuse-journal-*", "*.*"))
	if len(journal) != 0 {
		t.Fatalf("the journal still holds %d files after every upload: %v", len(journal), journal[:min(len(journal), 5)])
	}
	second.stop(t)
}

func journaledName(i int) string { return fmt.Sprintf("f-%03d", i) }

// journaledContent is file i's: sizes from 1 byte to some 8 KiB, each
// byte naming the file.
func journaledContent(i int) []byte {
	return bytes.Repeat([]byte{byte(i)}, 1+i*4099%8192)
}

type journalingMount struct {
	cmd     *exec.Cmd
	metrics string
	log     *bytes.Buffer
}

// startJournaling runs objfuse-mount with --async-close on mnt, keeping
// its staging files and journal in staging.
func startJournaling(t *testing.T, cfg s3store.Config, bucket, mnt, staging string) *journalingMount {
	t.Helper()
	addr, err := localserver.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	m := &journalingMount{metrics: addr, log: &bytes.Buffer{}}
	m.cmd = exec.Command(binary, "--foreground", "--async-close", "--endpoint", cfg.Endpoint, "--path-style",
		"--credentials-dir", cfg.CredentialsDir, "--staging-dir", staging, "--metrics-addr", m.metrics, bucket, mnt)
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if m.cmd.ProcessState == nil {
			m.cmd.Process.Kill()
			exited := make(chan error, 1)
			go func() { exited <- m.cmd.Wait() }()
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				// Killed while a thread of it waited on its own mount
				// (it cannot answer): only an abort ends that wait.
				t.Errorf("objfuse-mount did not exit within 10 s of SIGKILL; aborting its FUSE connection")
				abortConnection(mnt)
				<-exited
			}
		}
		syscall.Unmount(mnt, syscall.MNT_DETACH)
		if t.Failed() {
			t.Logf("objfuse-mount logged:\n%s", lastLines(m.log.Bytes(), 30))
		}
	})
	waitFor(t, "the mount", func() bool { return mounted(mnt) })
	return m
}

// stop ends the mount as a person would, which must work.
func (m *journalingMount) stop(t *testing.T) {
	t.Helper()
	m.cmd.Process.Signal(syscall.SIGTERM)
	if err := m.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

// abortConnection aborts the FUSE connection mounted at mnt, as the node
// plugin does to a hung mount.
func abortConnection(mnt string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == mnt {
			if _, minor, ok := strings.Cut(f[2], ":"); ok {
				os.WriteFile("/sys/fs/fuse/connections/"+minor+"/abort", []byte("1"), 0)
			}
		}
	}
}

// metric reads a metric's value from a mounter's /metrics, -1 when it
// cannot.
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+"{"); ok {
			f := strings.Fields(rest)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return -1
}

func waitForMetric(t *testing.T, addr, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for got := metric(t, addr, name); got != want; got = metric(t, addr, name) {
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, want %v", name, got, want)
		}
		<-time.After(50 * time.Millisecond)
	}
}

func countObjects(t *testing.T, srv *miniotest.Server, bucket string) int {
	t.Helper()
	n := 0
	for o := range srv.Client().ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		n++
	}
	return n
}
