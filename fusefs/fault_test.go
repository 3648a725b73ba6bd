package fusefs_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// TestMinioStopsMidWrite: the server dies while a large file is being
// written. close must fail, no partial object may appear, and once the
// server is back the same mount works again.
func TestMinioStopsMidWrite(t *testing.T) {
	for _, sync := range []string{"close", "fsync"} {
		t.Run(sync, func(t *testing.T) {
			srv := miniotest.Start(t)
			bucket := srv.Bucket()
			st, err := s3store.New(srv.Config(), bucket)
			if err != nil {
				t.Fatal(err)
			}
			dir := mountFS(t, st, fusefs.Options{})
			f, err := os.Create(filepath.Join(dir, "big"))
			if err != nil {
				t.Fatal(err)
			}
			chunk := randomBytes(1 << 20)
			for range 12 { // two 5 MiB parts go up
				if _, err := f.Write(chunk); err != nil {
					t.Fatal(err)
				}
			}
			srv.Stop()
			// Writes may or may not fail now (they are buffered); the
			// acknowledgement is close or fsync, and that must fail.
			for range 12 {
				if _, err := f.Write(chunk); err != nil {
					break
				}
			}
			var syncErr error
			if sync == "fsync" {
				syncErr = f.Sync()
			}
			closeErr := f.Close()
			if sync == "fsync" && syncErr == nil {
				t.Fatal("fsync succeeded with the server down")
			}
			if sync == "close" && closeErr == nil {
				t.Fatal("close succeeded with the server down")
			}
			srv.Restart()
			if _, err := st.Head(context.Background(), "big"); !errors.Is(err, store.ErrNotExist) {
				t.Fatalf("after a failed upload the object must not exist: %v", err)
			}
			// No multipart upload is left either.
			// The abort that failed while the server was down is retried,
			// so no incomplete upload lingers either.
			core := minio.Core{Client: srv.Client()}
			eventually(t, 30*time.Second, "the failed upload to be aborted", func() bool {
				res, err := core.ListMultipartUploads(context.Background(), bucket, "big", "", "", "", 10)
				return err == nil && len(res.Uploads) == 0
			})
			// The mount works again without remounting.
			eventually(t, 30*time.Second, "writes to work again", func() bool {
				return os.WriteFile(filepath.Join(dir, "after"), []byte("back"), 0o644) == nil
			})
			sameBytes(t, "after restart", stored(t, st, "after"), []byte("back"))
			if _, err := os.ReadDir(dir); err != nil {
				t.Fatalf("readdir after restart: %v", err)
			}
		})
	}
}

// TestAsyncUploadsOutlastAnOutage: files closed asynchronously while the
// server is down (a restart, a partition) are uploaded once it is back,
// not dropped after the client's few seconds of retries: no writer waits
// on them to hear of a failure. The mount reports the outage meanwhile.
func TestAsyncUploadsOutlastAnOutage(t *testing.T) {
	srv, st, f, dir := mountAsyncOnMinio(t)
	contents := map[string][]byte{}
	open := map[string]*os.File{}
	// Small files are journaled at close and go up right after; the large
	// one has sent two parts while written, lives in a multipart upload
	// that no journal holds, and so sends its last part and completes
	// before its close returns.
	for name, size := range map[string]int{"a": 4096, "b": 4096, "c": 4096, "large": 12 << 20} {
		h, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		contents[name] = randomBytes(size)
		if _, err := h.Write(contents[name]); err != nil {
			t.Fatal(err)
		}
		open[name] = h
	}
	srv.Stop()
	for _, name := range []string{"a", "b", "c"} {
		if err := open[name].Close(); err != nil {
			t.Fatalf("asynchronous close: %v", err)
		}
	}
	if h := f.Health(); h.PendingUploads != 3 || h.PendingBytes != 3*4096 || len(h.PendingFiles) != 3 {
		t.Fatalf("health with three files closed during the outage: %+v, want them pending", h)
	}
	largeClosed := make(chan error, 1)
	go func() { largeClosed <- open["large"].Close() }()
	eventually(t, 30*time.Second, "the outage reported", func() bool {
		return errors.Is(f.Health().Problem, store.ErrUnavailable)
	})
	srv.Restart()
	eventually(t, time.Minute, "every file uploaded once the server is back", func() bool {
		for name := range contents {
			if _, err := st.Head(context.Background(), name); err != nil {
				return false
			}
		}
		return true
	})
	if err := <-largeClosed; err != nil {
		t.Fatalf("the streamed file's close, which waits for its upload: %v", err)
	}
	for name, want := range contents {
		sameBytes(t, name, stored(t, st, name), want)
	}
	eventually(t, 10*time.Second, "nothing pending", func() bool { return f.Health().PendingUploads == 0 })
	if h := f.Health(); h.LostUploads != 0 || h.Problem != nil || h.PendingBytes != 0 {
		t.Fatalf("health after the outage: %+v", h)
	}
}

// TestStopByReportsWhatItCannotUpload: a mounter told to stop (its pod
// deleted) during an outage. Closes from then on wait for their upload,
// and uploads after earlier asynchronous closes, still retrying, are cut
// at the stop deadline and reported lost, by name, instead of dying
// unannounced with the process minutes before their own deadline. Their
// journal entries stay, for a successor in the same pod.
func TestStopByReportsWhatItCannotUpload(t *testing.T) {
	srv, st, f, dir := mountAsyncOnMinio(t)
	open := map[string]*os.File{}
	for name, size := range map[string]int{"early": 4096, "late": 4096} {
		h, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Write(randomBytes(size)); err != nil {
			t.Fatal(err)
		}
		open[name] = h
	}
	// "late" is written at random, so it is uploaded from a staging
	// file: a failed close leaves it to its RELEASE to try again.
	if _, err := open["late"].WriteAt([]byte("random"), 100); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := open["early"].Close(); err != nil {
		t.Fatalf("asynchronous close of early: %v", err)
	}

	far := time.Now().Add(time.Hour)
	f.StopBy(far)
	if err := open["late"].Close(); err == nil {
		t.Fatal("a close after StopBy returned before its upload, with S3 down")
	}
	if h := f.Health(); h.LostUploads != 0 {
		t.Fatalf("uploads reported lost before the stop deadline: %+v", h)
	}

	soon := time.Now().Add(2 * time.Second)
	f.StopBy(soon)
	f.StopBy(far) // too late: a deadline is only brought forward
	if d, ok := f.StopDeadline(); !ok || !d.Equal(soon) {
		t.Fatalf("stop deadline %v (%v), want %v", d, ok, soon)
	}
	eventually(t, 30*time.Second, "the asynchronous upload reported lost", func() bool {
		return f.Health().LostUploads == 1
	})
	if h := f.Health(); !strings.Contains(h.LastLostUpload, fusefs.ErrStopped.Error()) || !slices.Equal(h.LostFiles, []string{"early"}) {
		t.Fatalf("lost upload reported as %q, of %q; want the stop named, of early", h.LastLostUpload, h.LostFiles)
	}
	// A flush waits for every upload still running. "late" is not lost:
	// its writer heard of its failure from close.
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.Flush(fctx)
	if h := f.Health(); h.LostUploads != 1 {
		t.Fatalf("lost uploads %d (%s), want 1", h.LostUploads, h.LastLostUpload)
	}
	srv.Restart()
	for _, name := range []string{"early", "late"} {
		if _, err := st.Head(context.Background(), name); !errors.Is(err, store.ErrNotExist) {
			t.Fatalf("%s after the stop: %v, want it absent", name, err)
		}
	}
	// The deadline cut what ran then, not what comes after: a mount still
	// serving (released late) stores what is closed, durably.
	want := randomBytes(4096)
	if err := os.WriteFile(filepath.Join(dir, "after"), want, 0o644); err != nil {
		t.Fatalf("write after the deadline: %v", err)
	}
	sameBytes(t, "after", stored(t, st, "after"), want)
}

// TestAsyncCloseOutlivesAFailedFlush: a file closed asynchronously
// while another descriptor keeps it open is uploaded by whichever flush
// comes first (an fsync, the mounter's drain), not by its last RELEASE.
// Should that upload fail, the content stays journaled and pending, not
// lost: the last RELEASE uploads it once S3 is back.
func TestAsyncCloseOutlivesAFailedFlush(t *testing.T) {
	srv, st, f, dir := mountAsyncOnMinio(t)
	writer, reader := writerAndReader(t, filepath.Join(dir, "shared"))
	want := randomBytes(4096)
	if _, err := writer.Write(want); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := writer.Close(); err != nil {
		t.Fatalf("asynchronous close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := f.Flush(ctx); err == nil {
		t.Fatal("a drain with S3 down succeeded")
	}
	if h := f.Health(); h.LostUploads != 0 || h.PendingUploads != 1 || !slices.Equal(h.PendingFiles, []string{"shared"}) {
		t.Fatalf("health after the failed drain: %+v, want the file pending, not lost", h)
	}
	srv.Restart()
	reader.Close()
	eventually(t, 30*time.Second, "the last release's upload", func() bool { return f.Health().PendingUploads == 0 })
	sameBytes(t, "shared", stored(t, st, "shared"), want)
	if h := f.Health(); h.LostUploads != 0 {
		t.Fatalf("health after the upload: %+v", h)
	}
}

// A drain that fails at the stop deadline, before the deadline's timer
// ran (its context ends at the same instant), gives the upload up for the
// stop: the file is reported lost once, naming the stop, and the last
// RELEASE, with S3 back, neither tries it again nor stores what was
// reported lost (TestHandoffSignalDuringAnOutage once saw the RELEASE's
// later try report it lost for another reason).
func TestADrainFailingAtTheStopDeadlineGivesUpForGood(t *testing.T) {
	srv, st, f, dir := mountAsyncOnMinio(t)
	writer, reader := writerAndReader(t, filepath.Join(dir, "shared"))
	if _, err := writer.Write(randomBytes(4096)); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := writer.Close(); err != nil {
		t.Fatalf("asynchronous close: %v", err)
	}
	fusefs.PassStopDeadline(f)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	if err := f.Flush(ctx); err == nil {
		t.Fatal("a drain past its deadline succeeded")
	}
	h := f.Health()
	if h.LostUploads != 1 || !slices.Equal(h.LostFiles, []string{"shared"}) || !strings.Contains(h.LastLostUpload, fusefs.ErrStopped.Error()) || h.PendingUploads != 0 {
		t.Fatalf("health after the drain failed at the deadline: %+v, want the file lost for the stop", h)
	}
	srv.Restart()
	reader.Close()
	eventually(t, 30*time.Second, "the last release", func() bool { return fusefs.Opens(f, "shared") == 0 })
	if h := f.Health(); h.LostUploads != 1 || !strings.Contains(h.LastLostUpload, fusefs.ErrStopped.Error()) {
		t.Fatalf("health after the last release: %+v, want the one loss, for the stop", h)
	}
	if _, err := st.Head(context.Background(), "shared"); !errors.Is(err, store.ErrNotExist) {
		t.Fatalf("the file reported lost is in S3 after the last release (head: %v)", err)
	}
}

// writerAndReader creates the file p and opens it for reading too: the
// reader's close is then the last RELEASE. Both are closed before the
// unmount should the test end first.
func writerAndReader(t *testing.T, p string) (writer, reader *os.File) {
	writer, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { writer.Close() })
	reader, err = os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Close() })
	return writer, reader
}

// mountAsyncOnMinio mounts a new MinIO server's bucket with AsyncClose,
// for tests that stop the server under uploads no writer waits for.
func mountAsyncOnMinio(t *testing.T) (*miniotest.Server, store.Store, *fusefs.FS, string) {
	srv := miniotest.Start(t)
	st, err := s3store.New(srv.Config(), srv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	f, dir := mountFSOf(t, st, fusefs.Options{AsyncClose: true})
	return srv, st, f, dir
}

// TestStalledEndpointFailsClose: an endpoint that accepts the request and
// stops reading (or never answers) fails a close(2) that waits for its
// upload with EIO once the upload has stalled (see s3store's
// DefaultStallTimeout), instead of hanging it for as long as the endpoint
// likes; the mount works again once the endpoint does.
func TestStalledEndpointFailsClose(t *testing.T) {
	srv := miniotest.Start(t)
	front := srv.StallingFront(t)
	cfg := front.Config
	const stall = 2 * time.Second
	cfg.StallTimeout = stall
	st, err := s3store.New(cfg, srv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	dir := mountFS(t, st, fusefs.Options{PartSize: 5 << 20})
	for _, size := range []int{4 << 10, 12 << 20} { // one PUT; parts
		name := filepath.Join(dir, fmt.Sprintf("f%d", size))
		f, err := os.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		front.Stall()
		start := time.Now()
		closed := make(chan error, 1)
		go func() {
			if _, err := f.Write(randomBytes(size)); err != nil {
				f.Close()
				closed <- err
				return
			}
			closed <- f.Close()
		}()
		// A request whose answer has not begun is cut 4 stall timeouts
		// after its body was sent; a body that stops moving, after one.
		select {
		case err = <-closed:
		case <-time.After(6*stall + 10*time.Second):
			front.Resume()
			t.Fatalf("%d bytes: close still waits after %v on a stalled endpoint; the stall timeout is %v", size, time.Since(start), stall)
		}
		front.Resume()
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("%d bytes: write and close on a stalled endpoint: %v, want EIO", size, err)
		}
		t.Logf("%d bytes: failed after %v: %v", size, time.Since(start).Round(time.Millisecond), err)
	}
	eventually(t, 30*time.Second, "writes to work again", func() bool {
		return os.WriteFile(filepath.Join(dir, "after"), []byte("back"), 0o644) == nil
	})
	sameBytes(t, "after the stall", stored(t, st, "after"), []byte("back"))
}

// TestMmapWriteLostAtReleaseIsReported: a file written through a mapping
// that outlived its descriptor is uploaded by the last RELEASE, which no
// writer waits for (no close(2) or msync acknowledged those bytes). Should
// that upload fail, the loss is reported all the same.
func TestMmapWriteLostAtReleaseIsReported(t *testing.T) {
	srv := miniotest.Start(t)
	st, err := s3store.New(srv.Config(), srv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	f, dir := mountFSOf(t, st, fusefs.Options{})
	p := filepath.Join(dir, "mapped")
	if err := os.WriteFile(p, randomBytes(4096), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=mmap-after-close", "OBJFUSE_MMAP_PATH="+p)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "mapped\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the mapping's writer said %q (%v)", line, err)
	}
	// The mount's keys stop working: a failure no retry mends.
	srv.RestartWithCredentials("rotated-key", "rotated-secret")
	io.WriteString(stdin, "write\n")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the mapping's writer: %v", err)
	}
	eventually(t, 30*time.Second, "the lost upload to be reported", func() bool {
		h := f.Health()
		return h.LostUploads == 1 && strings.Contains(h.LastLostUpload, "mapped")
	})
}
