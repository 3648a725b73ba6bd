package serve

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
	"github.com/objfuse/objfuse/test/miniotest"
)

// The metrics port shows the filesystem's counters and, only when there
// is a read cache, the cache's.
func TestMetricsNameTheReadCacheOnlyWhenThereIsOne(t *testing.T) {
	tests := []struct {
		name      string
		cacheSize int64
		wantCache bool
	}{
		{"no cache", 0, false},
		{"with a cache", 8 << 20, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := fusefs.New(memstore.New(), fusefs.Options{ReadCacheSize: tc.cacheSize, StagingDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			text := scrape(t, serveMetricsOf(t, f))
			for _, m := range []string{`objfuse_buffer_bytes{source="objfuse:b/"} 0`, `objfuse_mapped_buffer_bytes{source="objfuse:b/"} 0`, "process_resident_memory_bytes", "objfuse_uploads_total", "objfuse_read_spliced_bytes_total"} {
				if !strings.Contains(text, m) {
					t.Errorf("no %s in /metrics", m)
				}
			}
			for _, m := range []string{"objfuse_read_cache_hits_total", "objfuse_read_cache_misses_total", "objfuse_read_cache_evictions_total", "objfuse_read_cache_write_errors_total", "objfuse_read_cache_bytes"} {
				if strings.Contains(text, m) != tc.wantCache {
					t.Errorf("%s shown: %v, want %v", m, !tc.wantCache, tc.wantCache)
				}
			}
		})
	}
}

// A mounter staged again serves a new filesystem; its metrics follow.
func TestMetricsFollowTheCurrentFilesystem(t *testing.T) {
	var fss [2]*fusefs.FS
	for i := range fss {
		f, err := fusefs.New(memstore.New(), fusefs.Options{StagingDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		fss[i] = f
	}
	fss[0].Stats().Uploads.Store(5)
	fss[1].Stats().Uploads.Store(7)
	var cur atomic.Int32
	addr := freeAddr(t)
	stop, err := serveMetrics(addr, func() *fusefs.FS { return fss[cur.Load()] }, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for i, want := range []string{`objfuse_uploads_total{source="s"} 5`, `objfuse_uploads_total{source="s"} 7`} {
		cur.Store(int32(i))
		if text := scrape(t, addr); !strings.Contains(text, want) {
			t.Errorf("filesystem %d: no %q in /metrics", i, want)
		}
	}
}

// serveMetricsOf serves f's metrics, as of a mount of "objfuse:b/", on a
// free loopback address until the test ends, and returns the address.
func serveMetricsOf(t *testing.T, f *fusefs.FS) string {
	t.Helper()
	addr := freeAddr(t)
	stop, err := serveMetrics(addr, func() *fusefs.FS { return f }, "objfuse:b/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A mount's S3 requests show on its metrics port by operation and status:
// Open's start-up check is one listing of the real bucket (no other test
// here sends a LIST).
func TestMetricsTimeTheRequestsOfAnOpenedMount(t *testing.T) {
	srv := miniotest.Start(t)
	cfg := Config{Bucket: srv.NewBucket(t), S3: srv.Config(), FS: fusefs.Options{StagingDir: t.TempDir()}}
	f, err := cfg.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := `objfuse_s3_request_duration_seconds_count{op="LIST",source="objfuse:b/",status="2xx"}`
	if text := scrape(t, serveMetricsOf(t, f)); !strings.Contains(text, want) {
		t.Errorf("no %s in /metrics:\n%s", want, text)
	}
}

// Profiles are served only on a loopback metrics address: a mounter pod's
// port is open to the cluster network.
func TestProfilesOnlyOnLoopback(t *testing.T) {
	f, err := fusefs.New(memstore.New(), fusefs.Options{StagingDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tests := []struct {
		name   string
		listen func(port string) string
		want   int
	}{
		{"loopback", func(port string) string { return "127.0.0.1:" + port }, http.StatusOK},
		{"every interface", func(port string) string { return ":" + port }, http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, port, err := net.SplitHostPort(freeAddr(t))
			if err != nil {
				t.Fatal(err)
			}
			stop, err := serveMetrics(tc.listen(port), func() *fusefs.FS { return f }, "s")
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			resp, err := http.Get("http://127.0.0.1:" + port + "/debug/pprof/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("/debug/pprof/ answered %d, want %d", resp.StatusCode, tc.want)
			}
			if text := scrape(t, "127.0.0.1:"+port); !strings.Contains(text, "objfuse_uploads_total") {
				t.Errorf("no metrics")
			}
		})
	}
}

// refusingStore is a store whose requests S3 refuses now.
type refusingStore struct{ *memstore.Store }

func (refusingStore) Health() store.Health {
	return store.Health{Problem: fmt.Errorf("keys refused: %w", store.ErrAccess), Since: time.Now()}
}

// The kind of problem a mount's S3 requests have now is one series set
// to 1, for alerts; a healthy mount's are all 0.
func TestMetricsShowTheS3Problem(t *testing.T) {
	tests := []struct {
		name string
		st   store.Store
		want string
	}{
		{"healthy", memstore.New(), ""},
		{"keys refused", refusingStore{memstore.New()}, "access"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := fusefs.New(tc.st, fusefs.Options{StagingDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			text := scrape(t, serveMetricsOf(t, f))
			for _, kind := range []string{"access", "bucket", "unavailable"} {
				v := "0"
				if kind == tc.want {
					v = "1"
				}
				if m := fmt.Sprintf(`objfuse_s3_problem{kind="%s",source="objfuse:b/"} %s`, kind, v); !strings.Contains(text, m) {
					t.Errorf("no %s in /metrics", m)
				}
			}
		})
	}
}
