package serve

import (
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/readcache"
	"github.com/objfuse/objfuse/mounter-pod/handoff"
)

// s3Requests times the S3 requests of this process's mount. It outlives
// the filesystems a mounter serves one after another, like the process
// collector: a slow or failing endpoint shows here first.
var s3Requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Namespace: "objfuse",
	Name:      "s3_request_duration_seconds",
	Help:      "S3 requests by operation and status (2xx to 5xx; canceled: the caller stopped waiting; timeout: objfuse's deadline passed; failed: no response), timed until the response headers came.",
	// 500 µs (a HEAD on a local server) to 12 s (a part on a slow link),
	// few enough for a series set per mounter pod.
	Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
}, []string{"op", "status"})

// observeRequest is the s3store.RequestObserver of every mount.
func observeRequest(op, status string, took time.Duration) {
	s3Requests.WithLabelValues(op, status).Observe(took.Seconds())
}

// serveMetrics exposes the counters of the filesystem current returns at
// addr/metrics. A mounter serves a new filesystem each time its volume is
// staged again; the metrics follow it (its counters start again from 0,
// as after a restart).
func serveMetrics(addr string, current func() *fusefs.FS, source string) (func(), error) {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"source": source}
	register := func(name, help string, gauge bool, v func() *atomic.Int64) {
		read := func() float64 {
			if p := v(); p != nil {
				return float64(p.Load())
			}
			return 0
		}
		if gauge {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "objfuse", Name: name, Help: help, ConstLabels: labels}, read))
			return
		}
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "objfuse", Name: name, Help: help, ConstLabels: labels}, read))
	}
	fsStat := func(name, help string, gauge bool, field func(*fusefs.Stats) *atomic.Int64) {
		register(name, help, gauge, func() *atomic.Int64 { return field(current().Stats()) })
	}
	cacheStat := func(name, help string, gauge bool, field func(*readcache.Stats) *atomic.Int64) {
		register(name, help, gauge, func() *atomic.Int64 {
			if c := current().ReadCache(); c != nil {
				return field(c.Stats())
			}
			return nil
		})
	}
	const counter, gauge = false, true
	fsStat("hidden_keys_total", "Keys that cannot be file names and are not shown.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.HiddenKeys })
	fsStat("upload_errors_total", "Uploads that failed and were reported to the writer as EIO.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.UploadErrors })
	fsStat("uploads_total", "Files uploaded.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.Uploads })
	fsStat("read_bytes_total", "Bytes read from the store through the mount.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.BytesRead })
	fsStat("read_spliced_bytes_total", "Bytes read ahead from the store through pipes, never copied through user space.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.BytesSpliced })
	fsStat("read_copied_replies_total", "READs of spliced readahead answered by copying: the data came in too many small pieces for one pipe.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.CopiedReplies })
	fsStat("read_cache_served_bytes_total", "Bytes of random reads answered from the local read cache.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.BytesFromCache })
	fsStat("lookup_peeks_total", "Lookups answered by a ranged GET that brought the file's first 128 KiB for its first read (its directory's files are read as soon as they are looked up): one request for a HEAD and the first read's GET.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.Peeks })
	fsStat("read_peeked_bytes_total", "Bytes of first reads answered from what the file's lookup peeked, held in memory for the read.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.BytesFromPeeks })
	fsStat("written_bytes_total", "Bytes written through the mount.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.BytesWritten })
	fsStat("write_requests_total", "WRITE requests the kernel sent: one per write call, unless its writeback cache gathers them (writebackCache).", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.Writes })
	fsStat("async_upload_errors_total", "Failed uploads no writer waited for (after an asynchronous close, or of writes through a memory mapping that outlived its descriptors): their data is not stored.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.AsyncUploadErrors })
	fsStat("write_conflicts_total", "Changes to files that another writer replaced meanwhile: each was kept under a conflict name instead, and its close or fsync failed.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.Conflicts })
	fsStat("panics_recovered_total", "Panics in FUSE handlers turned into EIO.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.PanicsRecovered })
	fsStat("buffer_bytes", "Memory held now in written data waiting for its upload, in readahead chunks and in bytes peeked for a first read (bounded by --memory-limit-mib).", gauge, func(s *fusefs.Stats) *atomic.Int64 { return &s.BufferBytes })
	fsStat("pending_uploads", "Files closed asynchronously and not uploaded yet: they wait in the journal on the staging disk, and a restarted mounter uploads them.", gauge, func(s *fusefs.Stats) *atomic.Int64 { return &s.PendingUploads })
	fsStat("pending_upload_bytes", "Bytes of the files closed asynchronously and not uploaded yet (dirty bytes).", gauge, func(s *fusefs.Stats) *atomic.Int64 { return &s.PendingBytes })
	fsStat("memory_spills_total", "Files continued in a local staging file because --memory-limit-mib had no room for their written data.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.MemorySpills })
	fsStat("unordered_spills_total", "Files continued in a local staging file because a write did not continue where the last one ended (random writes): uploaded from disk, in parts as they are written whole, rather than streamed from memory.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.UnorderedSpills })
	fsStat("early_parts_total", "Parts of files staged on disk that were uploaded while the file was still written, as its writers wrote them whole.", counter, func(s *fusefs.Stats) *atomic.Int64 { return &s.EarlyParts })
	if current().ReadCache() != nil {
		cacheStat("read_cache_hits_total", "Random reads answered from the local read cache.", counter, func(s *readcache.Stats) *atomic.Int64 { return &s.Hits })
		cacheStat("read_cache_misses_total", "Random reads the read cache could not answer (each a GET).", counter, func(s *readcache.Stats) *atomic.Int64 { return &s.Misses })
		cacheStat("read_cache_evictions_total", "1 MiB segments dropped from the read cache to stay within --read-cache-mib.", counter, func(s *readcache.Stats) *atomic.Int64 { return &s.Evictions })
		cacheStat("read_cache_write_errors_total", "Ranges the read cache could not write (a full disk); reads still succeed.", counter, func(s *readcache.Stats) *atomic.Int64 { return &s.WriteErrors })
		cacheStat("read_cache_bytes", "Bytes in the read cache now (bounded by --read-cache-mib).", gauge, func(s *readcache.Stats) *atomic.Int64 { return &s.Bytes })
	}
	// One series per kind, 1 while the mount's S3 requests fail for it:
	// what to alert on, as the node tells only the pods.
	for _, kind := range handoff.ProblemKinds {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "objfuse", Name: "s3_problem",
			Help:        "1 while the mount's S3 requests fail for a reason a person must fix: access (credentials or policy refused), bucket (it does not exist), unavailable (the endpoint does not answer).",
			ConstLabels: prometheus.Labels{"source": source, "kind": kind},
		}, func() float64 {
			if problemKind(current().Health().Problem) == kind {
				return 1
			}
			return 0
		}))
	}
	// The Go collector does not see these: with go_memstats_sys_bytes,
	// they are what the mounter holds (process_resident_memory_bytes
	// adds its code).
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "objfuse", Name: "mapped_buffer_bytes", ConstLabels: labels,
		Help: "Memory the part buffers have mapped outside the Go heap, in use and kept for reuse (within --memory-limit-mib; given back once unused for a while).",
	}, func() float64 { return float64(current().MappedBufferBytes()) }))
	prometheus.WrapRegistererWith(labels, reg).MustRegister(s3Requests)
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	// A mounter pod's port is open to the cluster network: a few scrapes
	// at once, and no connection held open for long, so that no client
	// can take the daemon's file descriptors or memory.
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: 4}))
	if loopback(l.Addr()) {
		// Profiles only on a port no other host can reach (a mount by
		// hand, the benchmark): a slow mount is profiled where it runs,
		// but a mounter pod's metrics port, open to the cluster network,
		// must not let any pod make it spend CPU on profiles.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/heap", pprof.Index)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err
		}
	}()
	return func() { srv.Close() }, nil
}

// loopback reports whether a listener's address is reachable only from
// this host.
func loopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
