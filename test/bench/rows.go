package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
)

// A row measures one or more metrics for one variant in one round.
type rowFunc func(e *env, v *variant, round int) (map[string]float64, error)

var rowOrder = []string{"write", "smallwrite", "read", "rand", "stat", "ls", "create", "loader"}

var fsRows = map[string]rowFunc{
	"write":      (*env).rowWrite,
	"smallwrite": (*env).rowSmallWrite,
	"read":       (*env).rowRead,
	"rand":       (*env).rowRand,
	"stat":       (*env).rowStat,
	"ls":         (*env).rowLs,
	"create":     (*env).rowCreate,
	"loader":     (*env).rowLoader,
}

const gib = float64(1 << 30)

// rowWrite copies size bytes into a new file on a fresh mount in 1 MiB
// writes and times it until a HEAD shows the whole object, sampling the
// daemon's CPU time and peak RSS.
func (e *env) rowWrite(v *variant, round int) (map[string]float64, error) {
	w, err := e.timeWrite(v, fmt.Sprintf("w-%s-r%d.bin", v.name, round), 1<<20)
	if err != nil {
		return nil, err
	}
	return map[string]float64{
		"write_mbps":       mbps(e.size, w.stored),
		"write_close_mbps": mbps(e.size, w.closed),
		"write_cpu":        w.cpu / (float64(e.size) / gib),
		"write_rss":        w.rss / 1e6,
	}, nil
}

// smallWriteSizes are the write sizes of the smallwrite row: dd bs=4k
// (and busybox's cp) and dd bs=64k.
var smallWriteSizes = []int{4 << 10, 64 << 10}

// rowSmallWrite writes size bytes in each of smallWriteSizes' writes, each
// into a new file on a fresh mount, timed until a HEAD shows the object.
func (e *env) rowSmallWrite(v *variant, round int) (map[string]float64, error) {
	out := map[string]float64{}
	for _, block := range smallWriteSizes {
		w, err := e.timeWrite(v, fmt.Sprintf("sw%dk-%s-r%d.bin", block>>10, v.name, round), block)
		if err != nil {
			return out, err
		}
		out[smallWriteKey(block)] = mbps(e.size, w.stored)
	}
	return out, nil
}

func smallWriteKey(block int) string { return fmt.Sprintf("smallwrite_%dk_mbps", block>>10) }

// timedWrite is what timeWrite measured: until the last close returned,
// until the object was whole in S3, and the daemon's CPU seconds and peak
// RSS (bytes) over it.
type timedWrite struct {
	closed, stored time.Duration
	cpu, rss       float64
}

// mbps is size bytes in d, in MB/s.
func mbps(size int64, d time.Duration) float64 { return float64(size) / d.Seconds() / 1e6 }

// timeWrite writes size bytes to name in writes of block bytes on a fresh
// mount, and times it until a HEAD shows the whole object.
func (e *env) timeWrite(v *variant, name string, block int) (timedWrite, error) {
	var w timedWrite
	m, err := e.startMount(v, true, false)
	if err != nil {
		return w, err
	}
	defer m.stop()
	defer e.client.RemoveObject(context.Background(), e.bucket, e.key(name), minio.RemoveObjectOptions{})
	cpu0 := cpuSeconds(m.pid)
	t0 := time.Now()
	if err := writeFileIn(filepath.Join(m.dir, name), e.size, e.pattern, block); err != nil {
		return w, fmt.Errorf("write in %d B writes: %w (%s)", block, err, tail(m.stderr.String()))
	}
	w.closed = time.Since(t0)
	if err := e.waitSize(name, e.size, 10*time.Minute); err != nil {
		return w, err
	}
	w.stored = time.Since(t0)
	w.cpu = cpuSeconds(m.pid) - cpu0
	w.rss = peakRSS(m.pid)
	return w, nil
}

// writeFile writes size bytes of pattern to path in 1 MiB writes and
// closes it, as cp would.
func writeFile(path string, size int64, pattern []byte) error {
	return writeFileIn(path, size, pattern, 1<<20)
}

// writeFileIn writes size bytes of pattern to path in writes of block
// bytes and closes it.
func writeFileIn(path string, size int64, pattern []byte, block int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	var off int64
	for off < size {
		n := int64(block)
		if size-off < n {
			n = size - off
		}
		p := int(off % int64(len(pattern)-block))
		if _, err := f.Write(pattern[p : p+int(n)]); err != nil {
			f.Close()
			return err
		}
		off += n
	}
	return f.Close()
}

// waitSize polls HEAD until key exists with size bytes.
func (e *env) waitSize(key string, size int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := e.client.StatObject(context.Background(), e.bucket, e.key(key), minio.StatObjectOptions{})
		if err == nil && st.Size == size {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not complete in S3 after %v (last: size %d, %v)", key, timeout, st.Size, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rowRead reads the pre-uploaded object sequentially on a cold mount.
func (e *env) rowRead(v *variant, round int) (map[string]float64, error) {
	m, err := e.startMount(v, true, false)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	cpu0 := cpuSeconds(m.pid)
	t0 := time.Now()
	n, err := readAll(filepath.Join(m.dir, seqKey))
	if err != nil {
		return nil, fmt.Errorf("read: %w (%s)", err, tail(m.stderr.String()))
	}
	d := time.Since(t0)
	if n != e.size {
		return nil, fmt.Errorf("read %d bytes of %d", n, e.size)
	}
	cpu := cpuSeconds(m.pid) - cpu0
	return map[string]float64{
		"read_mbps": float64(n) / d.Seconds() / 1e6,
		"read_cpu":  cpu / (float64(n) / gib),
	}, nil
}

// readAll reads the file at path to its end in 1 MiB reads, and returns
// the bytes read. Its buffer is one of a pool, as a data loader's worker
// reads into the same buffer file after file: a new one for each file
// would time the reader's own allocations (and their clearing), which the
// raw client's io.Copy does not pay.
func readAll(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := readBuffers.Get().(*[]byte)
	defer readBuffers.Put(buf)
	var total int64
	for {
		n, err := f.Read(*buf)
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

var readBuffers = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// randOffsets are the 4 KiB-aligned offsets of a round's random reads,
// the same for every variant and the raw client.
func (e *env) randOffsets(round int) []int64 {
	rng := rand.New(rand.NewSource(int64(round) + 1))
	blocks := e.size/4096 - 1
	offs := make([]int64, e.randReads)
	for i := range offs {
		offs[i] = rng.Int63n(blocks) * 4096
	}
	return offs
}

// rowRand times the first random 4 KiB reads after a cold mount.
func (e *env) rowRand(v *variant, round int) (map[string]float64, error) {
	m, err := e.startMount(v, true, false)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	f, err := os.Open(filepath.Join(m.dir, seqKey))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	first, err := preadAll(f, e.randOffsets(round))
	if err != nil {
		return nil, err
	}
	// The same reads again once the kernel has dropped its pages (as
	// memory pressure would): what a daemon kept on disk shows here.
	dropCaches()
	again, err := preadAll(f, e.randOffsets(round))
	if err != nil {
		return nil, err
	}
	return map[string]float64{
		"rand_p50": percentile(first, 50), "rand_p99": percentile(first, 99),
		"rand_again_p50": percentile(again, 50), "rand_again_p99": percentile(again, 99),
	}, nil
}

// preadAll reads 4 KiB at each offset and returns each read's latency in µs.
func preadAll(f *os.File, offs []int64) ([]float64, error) {
	buf := make([]byte, 4096)
	var lat []float64
	for _, off := range offs {
		t0 := time.Now()
		n, err := f.ReadAt(buf, off)
		if err != nil || n != len(buf) {
			return nil, fmt.Errorf("pread at %d: %d bytes, %v", off, n, err)
		}
		lat = append(lat, micros(time.Since(t0)))
	}
	return lat, nil
}

// statNames are never-listed files of the largest listing directory.
func (e *env) statNames(round int) []string {
	n := e.lsSizes[len(e.lsSizes)-1]
	rng := rand.New(rand.NewSource(int64(round) + 100))
	perm := rng.Perm(n)
	names := make([]string, 0, e.stats)
	for _, i := range perm[:min(e.stats, n)] {
		names = append(names, lsKey(n, i))
	}
	return names
}

// rowStat stats files that were never listed, on a cold mount: their
// directory is looked up first (not timed), then each file once.
func (e *env) rowStat(v *variant, round int) (map[string]float64, error) {
	m, err := e.startMount(v, true, false)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	names := e.statNames(round)
	if _, err := os.Stat(filepath.Join(m.dir, filepath.Dir(names[0]))); err != nil {
		return nil, err
	}
	var lat []float64
	start := time.Now()
	for _, name := range names {
		t0 := time.Now()
		if _, err := os.Stat(filepath.Join(m.dir, name)); err != nil {
			return nil, err
		}
		lat = append(lat, micros(time.Since(t0)))
	}
	return map[string]float64{"stat_p50": percentile(lat, 50), "stat_p99": percentile(lat, 99),
		"stat_mean": micros(time.Since(start)) / float64(len(names))}, nil
}

// rowLoader is a training job's data loader: every object of the loader
// directory read whole, cold, by loaderReaders readers side by side (each
// takes the next file), timed from the first open to the last byte.
func (e *env) rowLoader(v *variant, round int) (map[string]float64, error) {
	m, err := e.startMount(v, true, false)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	names := e.loaderNames(round)
	if _, err := os.Stat(filepath.Join(m.dir, loaderDir)); err != nil {
		return nil, err
	}
	start, cpu0 := time.Now(), cpuSeconds(m.pid)
	n, err := inParallel(names, func(name string) (int64, error) { return readAll(filepath.Join(m.dir, name)) })
	if err != nil {
		return nil, err
	}
	return loaderFigures(n, len(names), time.Since(start), cpuSeconds(m.pid)-cpu0), nil
}

// loaderReaders are the data loader's readers (PyTorch's num_workers).
const loaderReaders = 8

const loaderDir = "loader"

func loaderKey(i int) string { return fmt.Sprintf("%s/s%05d.bin", loaderDir, i) }

// loaderNames are the loader's files in a shuffled order, as an epoch
// reads them.
func (e *env) loaderNames(round int) []string {
	rng := rand.New(rand.NewSource(int64(round) + 200))
	names := make([]string, 0, e.loaderFiles)
	for _, i := range rng.Perm(e.loaderFiles) {
		names = append(names, loaderKey(i))
	}
	return names
}

// inParallel runs read on each name with loaderReaders workers, and
// returns the bytes read.
func inParallel(names []string, read func(string) (int64, error)) (int64, error) {
	next := make(chan string)
	type result struct {
		n   int64
		err error
	}
	results := make(chan result, loaderReaders)
	for range loaderReaders {
		go func() {
			var r result
			for name := range next {
				if r.err != nil {
					continue
				}
				n, err := read(name)
				r.n += n
				if err != nil {
					r.err = fmt.Errorf("%s: %w", name, err)
				}
			}
			results <- r
		}()
	}
	for _, name := range names {
		next <- name
	}
	close(next)
	var total int64
	var errs []error
	for range loaderReaders {
		r := <-results
		total += r.n
		errs = append(errs, r.err)
	}
	return total, errors.Join(errs...)
}

func loaderFigures(bytes int64, files int, d time.Duration, cpu float64) map[string]float64 {
	return map[string]float64{"loader_fps": float64(files) / d.Seconds(), "loader_mbps": float64(bytes) / 1e6 / d.Seconds(),
		"loader_cpu": cpu / (float64(files) / 1000)}
}

// rowLs runs `ls -l` of each listing directory on a cold mount, then again
// right away (warm).
func (e *env) rowLs(v *variant, round int) (map[string]float64, error) {
	out := map[string]float64{}
	for _, n := range e.lsSizes {
		m, err := e.startMount(v, true, false)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(m.dir, lsDir(n))
		cold, err := lsL(dir, n)
		if err == nil {
			var warm time.Duration
			warm, err = lsL(dir, n)
			out[fmt.Sprintf("ls_cold_%d", n)] = cold.Seconds()
			out[fmt.Sprintf("ls_warm_%d", n)] = warm.Seconds()
		}
		m.stop()
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// lsL times `ls -l dir` and checks it shows want entries.
func lsL(dir string, want int) (time.Duration, error) {
	cmd := exec.Command("ls", "-l", dir)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	t0 := time.Now()
	out, err := cmd.Output()
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("ls -l %s: %w", dir, err)
	}
	if got := strings.Count(string(out), "\n") - 1; got != want { // minus the "total" line
		return d, fmt.Errorf("ls -l %s: %d entries, want %d", dir, got, want)
	}
	return d, nil
}

// rowCreate creates small files in a new directory and times it until a
// listing of the bucket shows them all.
func (e *env) rowCreate(v *variant, round int) (map[string]float64, error) {
	m, err := e.startMount(v, false, false)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	prefix := fmt.Sprintf("c-%s-r%d/", v.name, round)
	defer e.removePrefix(prefix)
	dir := filepath.Join(m.dir, strings.TrimSuffix(prefix, "/"))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	body := e.pattern[:4096]
	quiet()
	t0 := time.Now()
	for i := range e.files {
		if err := os.WriteFile(filepath.Join(dir, createName(i)), body, 0o644); err != nil {
			return nil, fmt.Errorf("create: %w (%s)", err, tail(m.stderr.String()))
		}
	}
	closed := time.Since(t0)
	if err := e.waitListed(prefix, e.files, 5*time.Minute); err != nil {
		return nil, err
	}
	d := time.Since(t0)
	return map[string]float64{
		"create_fps":       float64(e.files) / d.Seconds(),
		"create_close_fps": float64(e.files) / closed.Seconds(),
	}, nil
}

// createFormat names the create row's i-th file: names sort as they are made.
const createFormat = "f%05d"

func createName(i int) string { return fmt.Sprintf(createFormat, i) }

// waitListed waits until the create row's n files under prefix are all
// listed in full. Each poll lists only past the longest run of files seen
// from the first on: listing all of them every 50 ms would take MinIO's
// CPU from the uploads still running after an asynchronous close, slowing
// what it measures.
func (e *env) waitListed(prefix string, n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	seen := make([]bool, n)
	next := 0 // files before next are all listed
	for {
		opts := minio.ListObjectsOptions{Prefix: e.key(prefix), Recursive: true}
		if next > 0 {
			opts.StartAfter = e.key(prefix + createName(next-1))
		}
		for o := range e.client.ListObjects(context.Background(), e.bucket, opts) {
			var i int
			if o.Err != nil || o.Size != 4096 {
				continue
			}
			if _, err := fmt.Sscanf(path.Base(o.Key), createFormat, &i); err == nil && i < n {
				seen[i] = true
			}
		}
		for next < n && seen[next] {
			next++
		}
		if next == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v, only the first %d of %d files are listed", within, next, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) removePrefix(prefix string) {
	ctx := context.Background()
	ch := e.client.ListObjects(ctx, e.bucket, minio.ListObjectsOptions{Prefix: e.key(prefix), Recursive: true})
	for err := range e.client.RemoveObjects(ctx, e.bucket, ch, minio.RemoveObjectsOptions{}) {
		_ = err
	}
	e.client.RemoveObject(ctx, e.bucket, e.key(prefix), minio.RemoveObjectOptions{})
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(float64(len(s)-1)*p/100 + 0.5)
	return s[i]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

var errSkip = errors.New("skipped")
