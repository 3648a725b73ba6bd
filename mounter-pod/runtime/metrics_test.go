package runtime

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
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
			addr := freeAddr(t)
			stop, err := serveMetrics(addr, f, "objfuse:b/")
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			text := string(body)
			for _, m := range []string{`objfuse_buffer_bytes{source="objfuse:b/"} 0`, "objfuse_uploads_total", "objfuse_read_spliced_bytes_total"} {
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
