package fusefs_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// Many files closed asynchronously on MinIO go up in shared requests,
// and each is stored as if uploaded alone: a fresh mount shows its bytes,
// its mode and its mtime.
func TestAsyncClosesShareRequestsOnMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	var puts atomic.Int32
	// The files' single PUTs are held until a wave of files has been
	// written and all their uploads have started: the uploads behind the
	// two held queue, and how many requests they share cannot depend on
	// how fast this machine runs the writers or MinIO.
	target, _ := url.Parse(srv.Endpoint)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var gate atomic.Pointer[chan struct{}]
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/d/f") && r.Header.Get("X-Amz-Meta-Snowball-Auto-Extract") == "" {
			<-*gate.Load()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	cfg := srv.Config()
	cfg.Endpoint = front.URL
	cfg.Observe = func(op, _ string, _ time.Duration) {
		if op == "PUT" || op == "PUT_BATCH" {
			puts.Add(1)
		}
	}
	bucket := srv.Bucket()
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	counted := &enteringPuts{Store: st}
	_, dir := mountFSOf(t, counted, fusefs.Options{AsyncClose: true})
	open := func() {
		if g := gate.Load(); g != nil {
			select {
			case <-*g:
			default:
				close(*g)
			}
		}
	}
	t.Cleanup(open) // before the unmount, which waits for held uploads
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A wave's uploads all start (each on its file's RELEASE) only if the
	// kernel lets that many requests wait in the background: at most 64
	// (MaxBackground).
	const n, wave = 400, 48
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	content := func(i int) []byte { return []byte(fmt.Sprintf("file %d %s", i, make([]byte, i*7))) }
	waves := 0
	for first := 0; first < n; first += wave {
		waves++
		last := min(first+wave, n)
		g := make(chan struct{})
		gate.Store(&g)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := first + w; i < last; i += 8 {
					if err := writeWithAttrs(filepath.Join(dir, "d", fmt.Sprintf("f%03d", i)), content(i), i%3 == 0, mtime); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		eventually(t, time.Minute, "the wave's uploads to start", func() bool { return counted.entered.Load() == int32(last) })
		open()
		eventually(t, time.Minute, "the wave's uploads to end", func() bool { return counted.returned.Load() == int32(last) })
	}
	// Each wave: two held single PUTs, then the rest queued behind them
	// in one batch (at most 128): about 3 requests. A put counted as
	// started but still on its way into the queue when the gate opens may
	// go on its own, so the bound leaves room; a batch that failed would
	// put its files one by one, several hundred requests.
	if got := puts.Load(); got > n/8 {
		t.Errorf("%d files in %d waves took %d PUT requests: not batched", n, waves, got)
	}
	t.Logf("%d files in %d waves: %d PUT requests", n, waves, puts.Load())
	k := 0
	for e, err := range st.List(t.Context(), "d/", "", true) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Key != "d/" {
			k++
		}
	}
	if k != n {
		t.Fatalf("%d files listed in S3, want %d", k, n)
	}

	fresh, err := s3store.New(srv.Config(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	_, again := mountFSOf(t, fresh, fusefs.Options{})
	for i := range n {
		p := filepath.Join(again, "d", fmt.Sprintf("f%03d", i))
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sameBytes(t, p, got, content(i))
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 && (fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(mtime)) {
			t.Errorf("%s: mode %v mtime %v after a remount, want 0600 and %v", p, fi.Mode(), fi.ModTime(), mtime)
		}
		if i%3 != 0 && fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v after a remount, want 0644", p, fi.Mode())
		}
	}
}

// enteringPuts counts the puts of files under d/ that have started and
// that have returned.
type enteringPuts struct {
	store.Store
	entered, returned atomic.Int32
}

func (s *enteringPuts) Put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	if !strings.HasPrefix(key, "d/f") {
		return s.Store.Put(ctx, key, r, size, meta)
	}
	s.entered.Add(1)
	defer s.returned.Add(1)
	return s.Store.Put(ctx, key, r, size, meta)
}

// writeWithAttrs writes a file and, with chmod, sets its mode to 0600
// and its mtime while it is open, so that its one upload carries them.
func writeWithAttrs(p string, data []byte, chmod bool, mtime time.Time) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if chmod {
		if err := f.Chmod(0o600); err != nil {
			return err
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			return err
		}
	}
	return f.Close()
}
