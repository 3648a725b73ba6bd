package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
)

// The raw minio-go anchors: the same MinIO, no filesystem in between.
// Each is stored under the key of the filesystem row it bounds, so the
// table can put them side by side.
var rawRows = map[string]func(e *env, round int) (map[string]float64, error){
	"write": (*env).rawPut,
	// The small-write rows compare with the write row's PutObject.
	"smallwrite": func(*env, int) (map[string]float64, error) { return nil, nil },
	"read":       (*env).rawGet,
	"rand":       (*env).rawRanged,
	"stat":       (*env).rawHead,
	"ls":         (*env).rawList,
	"create":     (*env).rawSmallPuts,
	"loader":     (*env).rawLoader,
}

// selfCPU is this process's user plus system CPU time: the raw client's
// CPU cost, comparable with a daemon's.
func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// patternReader streams size bytes of the pattern, as writeFile does.
type patternReader struct {
	pattern []byte
	off     int64
	size    int64
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	const block = 1 << 20
	n := int64(len(p))
	n = min(n, block, r.size-r.off)
	s := int(r.off % int64(len(r.pattern)-block))
	c := copy(p[:n], r.pattern[s:s+int(n)])
	r.off += int64(c)
	return c, nil
}

// ReadAt makes the reader an io.ReaderAt, which minio-go needs to send a
// large object's parts in parallel (it sends those of a plain reader one
// after the other).
func (r *patternReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && off < r.size {
		s := int(off % int64(len(r.pattern)))
		c := copy(p[n:], r.pattern[s:min(len(r.pattern), s+int(r.size-off))])
		n += c
		off += int64(c)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// rawPut: one PutObject of size bytes with minio-go's defaults.
func (e *env) rawPut(round int) (map[string]float64, error) {
	key := fmt.Sprintf("raw/put-r%d.bin", round)
	defer e.client.RemoveObject(context.Background(), e.bucket, e.key(key), minio.RemoveObjectOptions{})
	quiet()
	cpu0 := selfCPU()
	t0 := time.Now()
	_, err := e.client.PutObject(context.Background(), e.bucket, e.key(key), &patternReader{pattern: e.pattern, size: e.size}, e.size, minio.PutObjectOptions{})
	if err != nil {
		return nil, err
	}
	d := time.Since(t0)
	return map[string]float64{
		"write_mbps":       float64(e.size) / d.Seconds() / 1e6,
		"write_close_mbps": float64(e.size) / d.Seconds() / 1e6,
		"write_cpu":        (selfCPU() - cpu0) / (float64(e.size) / gib),
	}, nil
}

// rawGet: one single-stream GetObject of the read object, caches dropped.
func (e *env) rawGet(round int) (map[string]float64, error) {
	dropCaches()
	cpu0 := selfCPU()
	t0 := time.Now()
	obj, err := e.client.GetObject(context.Background(), e.bucket, e.key(seqKey), minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := obj.Read(buf)
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	d := time.Since(t0)
	if n != e.size {
		return nil, fmt.Errorf("got %d bytes of %d", n, e.size)
	}
	return map[string]float64{
		"read_mbps": float64(n) / d.Seconds() / 1e6,
		"read_cpu":  (selfCPU() - cpu0) / (float64(n) / gib),
	}, nil
}

// rawRanged: one ranged 4 KiB GET per offset of the round's random reads.
func (e *env) rawRanged(round int) (map[string]float64, error) {
	dropCaches()
	buf := make([]byte, 4096)
	var lat []float64
	for _, off := range e.randOffsets(round) {
		t0 := time.Now()
		opts := minio.GetObjectOptions{}
		opts.SetRange(off, off+4095)
		obj, err := e.client.GetObject(context.Background(), e.bucket, e.key(seqKey), opts)
		if err != nil {
			return nil, err
		}
		_, err = io.ReadFull(obj, buf)
		obj.Close()
		if err != nil {
			return nil, err
		}
		lat = append(lat, micros(time.Since(t0)))
	}
	return map[string]float64{"rand_p50": percentile(lat, 50), "rand_p99": percentile(lat, 99)}, nil
}

// rawHead: one HEAD round trip per never-listed file of the stat row,
// after dropping the page cache as the filesystems' cold mounts do (so
// that MinIO reads object metadata from disk in both).
func (e *env) rawHead(round int) (map[string]float64, error) {
	dropCaches()
	var lat []float64
	names := e.statNames(round)
	start := time.Now()
	for _, name := range names {
		t0 := time.Now()
		if _, err := e.client.StatObject(context.Background(), e.bucket, e.key(name), minio.StatObjectOptions{}); err != nil {
			return nil, err
		}
		lat = append(lat, micros(time.Since(t0)))
	}
	return map[string]float64{"stat_p50": percentile(lat, 50), "stat_p99": percentile(lat, 99),
		"stat_mean": micros(time.Since(start)) / float64(len(names))}, nil
}

// rawLoader: the loader's objects read whole by loaderReaders GETs side
// by side, after dropping the page cache as the filesystems' cold mounts
// do.
func (e *env) rawLoader(round int) (map[string]float64, error) {
	dropCaches()
	names := e.loaderNames(round)
	start, cpu0 := time.Now(), selfCPU()
	n, err := inParallel(names, func(name string) (int64, error) {
		o, err := e.client.GetObject(context.Background(), e.bucket, e.key(name), minio.GetObjectOptions{})
		if err != nil {
			return 0, err
		}
		defer o.Close()
		return io.Copy(io.Discard, o)
	})
	if err != nil {
		return nil, err
	}
	return loaderFigures(n, len(names), time.Since(start), selfCPU()-cpu0), nil
}

// rawList: ListObjectsV2 (delimited, as a directory listing) of each
// listing directory, after dropping the page cache as the filesystems'
// cold mounts do; the same figure stands for cold and warm.
func (e *env) rawList(round int) (map[string]float64, error) {
	out := map[string]float64{}
	for _, n := range e.lsSizes {
		d, err := e.rawListOnce(n, false)
		if err != nil {
			return nil, err
		}
		out[fmt.Sprintf("ls_cold_%d", n)] = d
		out[fmt.Sprintf("ls_warm_%d", n)] = d
		// What objfuse asks for: each object's metadata in the listing
		// (a MinIO extension), so that `ls -l` needs no HEAD per file.
		if d, err = e.rawListOnce(n, true); err != nil {
			return nil, err
		}
		out[fmt.Sprintf("ls_meta_cold_%d", n)] = d
	}
	return out, nil
}

// rawListOnce lists the n-object directory after dropping the page cache
// and returns how long it took, in seconds.
func (e *env) rawListOnce(n int, withMetadata bool) (float64, error) {
	dropCaches()
	t0 := time.Now()
	got := 0
	opts := minio.ListObjectsOptions{Prefix: e.key(lsDir(n) + "/"), WithMetadata: withMetadata}
	for o := range e.client.ListObjects(context.Background(), e.bucket, opts) {
		if o.Err != nil {
			return 0, o.Err
		}
		if o.Key != e.key(lsDir(n)+"/") {
			got++
		}
	}
	d := time.Since(t0).Seconds()
	if got != n {
		return 0, fmt.Errorf("listed %d of %d", got, n)
	}
	return d, nil
}

// rawSmallPuts: sequential 4 KiB PutObjects, the small-file rate limit of
// one client doing one thing at a time; then the same files with 32 PUTs
// in flight, the most this MinIO takes (the ceiling for an asynchronous
// close, whose uploads run in parallel).
func (e *env) rawSmallPuts(round int) (map[string]float64, error) {
	prefix := fmt.Sprintf("raw/small-r%d/", round)
	defer e.removePrefix(prefix)
	body := e.pattern[:4096]
	put := func(i int, sub string) error {
		_, err := e.client.PutObject(context.Background(), e.bucket, e.key(fmt.Sprintf("%s%sf%05d", prefix, sub, i)), bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
		return err
	}
	quiet()
	t0 := time.Now()
	for i := range e.files {
		if err := put(i, ""); err != nil {
			return nil, err
		}
	}
	fps := float64(e.files) / time.Since(t0).Seconds()

	const parallel = 32
	next := make(chan int)
	errs := make(chan error, parallel)
	quiet()
	t0 = time.Now()
	for range parallel {
		go func() {
			var first error
			for i := range next {
				if err := put(i, "par/"); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for i := range e.files {
		next <- i
	}
	close(next)
	for range parallel {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	par := float64(e.files) / time.Since(t0).Seconds()
	return map[string]float64{"create_fps": fps, "create_close_fps": fps, "create_par_fps": par}, nil
}
