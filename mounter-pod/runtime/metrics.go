package runtime

import (
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/objfuse/objfuse/fusefs"
)

// serveMetrics exposes the filesystem's counters at addr/metrics.
func serveMetrics(addr string, f *fusefs.FS, source string) (func(), error) {
	reg := prometheus.NewRegistry()
	st := f.Stats()
	labels := prometheus.Labels{"source": source}
	counter := func(name, help string, v *atomic.Int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "objfuse", Name: name, Help: help, ConstLabels: labels,
		}, func() float64 { return float64(v.Load()) }))
	}
	gauge := func(name, help string, v *atomic.Int64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "objfuse", Name: name, Help: help, ConstLabels: labels,
		}, func() float64 { return float64(v.Load()) }))
	}
	counter("hidden_keys_total", "Keys that cannot be file names and are not shown.", &st.HiddenKeys)
	counter("upload_errors_total", "Uploads that failed and were reported to the writer as EIO.", &st.UploadErrors)
	counter("uploads_total", "Files uploaded.", &st.Uploads)
	counter("read_bytes_total", "Bytes read from the store through the mount.", &st.BytesRead)
	counter("read_spliced_bytes_total", "Bytes read ahead from the store through pipes, never copied through user space.", &st.BytesSpliced)
	counter("read_copied_replies_total", "READs of spliced readahead answered by copying: the data came in too many small pieces for one pipe.", &st.CopiedReplies)
	counter("written_bytes_total", "Bytes written through the mount.", &st.BytesWritten)
	counter("async_upload_errors_total", "Uploads after an asynchronous close that failed.", &st.AsyncUploadErrors)
	counter("panics_recovered_total", "Panics in FUSE handlers turned into EIO.", &st.PanicsRecovered)
	gauge("buffer_bytes", "Memory held now in upload parts and readahead chunks (bounded by --memory-limit-mib).", &st.BufferBytes)
	if c := f.ReadCache(); c != nil {
		cs := c.Stats()
		counter("read_cache_hits_total", "Random reads answered from the local read cache.", &cs.Hits)
		counter("read_cache_misses_total", "Random reads the read cache could not answer (each a GET).", &cs.Misses)
		counter("read_cache_evictions_total", "1 MiB blocks dropped from the read cache to stay within --read-cache-mib.", &cs.Evictions)
		counter("read_cache_write_errors_total", "Ranges the read cache could not write or free (a full disk); reads still succeed.", &cs.WriteErrors)
		gauge("read_cache_bytes", "Bytes in the read cache now (bounded by --read-cache-mib).", &cs.Bytes)
	}
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// Profiles on the same (local) port: performance is measured, and a
	// slow mount in production is profiled where it runs.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/heap", pprof.Index)
	srv := &http.Server{Handler: mux}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err
		}
	}()
	return func() { srv.Close() }, nil
}
