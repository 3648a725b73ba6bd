package fusefs_test

// Micro-benchmarks of the read, write, lookup and readdir paths through a
// real FUSE mount, on the in-memory store (the filesystem's own cost: FUSE
// round trips, locking, buffers) and on a real MinIO (plus S3 requests).
// The whole-system comparison with s3fs and rclone is test/bench.
//
//	go test -run XXX -bench . ./fusefs/

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

type benchBackend struct {
	name  string
	fresh func(b *testing.B) store.Store
}

func benchBackends() []benchBackend {
	return []benchBackend{
		{"memory", func(b *testing.B) store.Store { return memstore.New() }},
		{"minio", func(b *testing.B) store.Store {
			minioOnce.Do(func() { minioServer = miniotest.StartShared() })
			if minioServer == nil {
				b.Fatal("minio failed to start")
			}
			st, err := s3store.New(minioServer.Config(), minioServer.NewBucket(b))
			if err != nil {
				b.Fatal(err)
			}
			return st
		}},
	}
}

// benchOpts are the daemon's defaults (8 MiB parts), not the tests' 5 MiB.
func benchOpts() fusefs.Options { return fusefs.Options{PartSize: 8 << 20} }

const benchFileSize = 64 << 20

// dropPages forgets a file's pages in the kernel, so the next read goes
// through FUSE to the filesystem again.
func dropPages(tb testing.TB, f *os.File) {
	tb.Helper()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkSeqWrite writes a 64 MiB file in 1 MiB, 64 KiB and 4 KiB
// writes and closes it:
// with durable close, the object is complete in the store on return.
func BenchmarkSeqWrite(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 10, 4 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) { benchSeqWrite(b, size) })
	}
}

// benchSeqWrite is BenchmarkSeqWrite in writes of size bytes (a program
// writing with small buffers: dd bs=4k, busybox cp).
func benchSeqWrite(b *testing.B, size int) {
	chunk := randomBytes(size)
	for _, be := range benchBackends() {
		b.Run(be.name, func(b *testing.B) {
			dir := mountFS(b, be.fresh(b), benchOpts())
			b.SetBytes(benchFileSize)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f, err := os.Create(filepath.Join(dir, "big"))
				if err != nil {
					b.Fatal(err)
				}
				for off := 0; off < benchFileSize; off += len(chunk) {
					if _, err := f.Write(chunk); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSeqRead reads a 64 MiB object start to end in 1 MiB reads, with
// the kernel's copy dropped first (readahead path).
func BenchmarkSeqRead(b *testing.B) {
	for _, be := range benchBackends() {
		b.Run(be.name, func(b *testing.B) {
			st := be.fresh(b)
			put(b, st, "big", randomBytes(benchFileSize))
			dir := mountFS(b, st, benchOpts())
			buf := make([]byte, 1<<20)
			b.SetBytes(benchFileSize)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f, err := os.Open(filepath.Join(dir, "big"))
				if err != nil {
					b.Fatal(err)
				}
				dropPages(b, f)
				n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
				f.Close()
				if err != nil || n != benchFileSize {
					b.Fatalf("read %d bytes: %v", n, err)
				}
			}
		})
	}
}

// BenchmarkRandRead4K reads 4 KiB at random offsets of a 64 MiB object
// (ranged-GET path), the kernel's copy dropped before each read.
func BenchmarkRandRead4K(b *testing.B) {
	for _, be := range benchBackends() {
		b.Run(be.name, func(b *testing.B) {
			st := be.fresh(b)
			put(b, st, "big", randomBytes(benchFileSize))
			dir := mountFS(b, st, benchOpts())
			f, err := os.Open(filepath.Join(dir, "big"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			rng := rand.New(rand.NewSource(1))
			buf := make([]byte, 4096)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				dropPages(b, f)
				off := rng.Int63n(benchFileSize/4096) * 4096
				if n, err := f.ReadAt(buf, off); err != nil || n != len(buf) {
					b.Fatalf("pread at %d: %d, %v", off, n, err)
				}
			}
		})
	}
}

// BenchmarkRawRangedGet4K is the anchor of BenchmarkRandRead4K/minio: the
// same reads as ranged GETs of minio-go itself, without FUSE or objfuse.
func BenchmarkRawRangedGet4K(b *testing.B) {
	onMinIO := benchBackends()[1]
	st := onMinIO.fresh(b).(*s3store.Store)
	put(b, st, "big", randomBytes(benchFileSize))
	c, bucket := st.Client(), st.Bucket()
	rng := rand.New(rand.NewSource(1))
	buf := make([]byte, 4096)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := rng.Int63n(benchFileSize/4096) * 4096
		var opts minio.GetObjectOptions
		opts.SetRange(off, off+int64(len(buf))-1)
		obj, err := c.GetObject(context.Background(), bucket, "big", opts)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.ReadFull(obj, buf); err != nil || n != len(buf) {
			b.Fatalf("ranged GET at %d: %d, %v", off, n, err)
		}
		obj.Close()
	}
}

// populate puts n small objects dir/f00000... into st.
func populate(b *testing.B, st store.Store, dir string, n int) {
	body := []byte("objfuse\n")
	for i := range n {
		put(b, st, fmt.Sprintf("%s/f%05d", dir, i), body)
	}
}

// BenchmarkLookup stats files of a 1,000-entry directory. "uncached" runs
// with 1 ns TTLs, so every stat is a lookup the filesystem answers from
// the store; "cached" with the default 1 s TTLs after one listing.
func BenchmarkLookup(b *testing.B) {
	for _, be := range benchBackends() {
		st := be.fresh(b)
		populate(b, st, "d", 1000)
		for _, mode := range []string{"uncached", "cached"} {
			b.Run(be.name+"/"+mode, func(b *testing.B) {
				opts := benchOpts()
				if mode == "uncached" {
					opts.StatTTL, opts.ListTTL = time.Nanosecond, time.Nanosecond
				}
				dir := mountFS(b, st, opts)
				if mode == "cached" {
					if _, err := os.ReadDir(filepath.Join(dir, "d")); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := os.Stat(filepath.Join(dir, "d", fmt.Sprintf("f%05d", i%1000))); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkReaddir lists a 1,000-entry directory: names only, and names
// plus an lstat of each (what `ls -l` does), with listing caches defeated
// (1 ns TTLs) and with the default TTLs.
func BenchmarkReaddir(b *testing.B) {
	for _, be := range benchBackends() {
		st := be.fresh(b)
		populate(b, st, "d", 1000)
		for _, ttl := range []string{"ttl1ns", "ttl1s"} {
			for _, what := range []string{"names", "names+lstat"} {
				b.Run(be.name+"/"+ttl+"/"+what, func(b *testing.B) {
					opts := benchOpts()
					if ttl == "ttl1ns" {
						opts.StatTTL, opts.ListTTL = time.Nanosecond, time.Nanosecond
					}
					d := filepath.Join(mountFS(b, st, opts), "d")
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						f, err := os.Open(d)
						if err != nil {
							b.Fatal(err)
						}
						names, err := f.Readdirnames(-1)
						f.Close()
						if err != nil || len(names) != 1000 {
							b.Fatalf("readdir: %d names, %v", len(names), err)
						}
						if what == "names+lstat" {
							for _, n := range names {
								if _, err := os.Lstat(filepath.Join(d, n)); err != nil {
									b.Fatal(err)
								}
							}
						}
					}
				})
			}
		}
	}
}
