package s3store_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
	"github.com/objfuse/objfuse/test/versitytest"
)

// putCase is one object a batch test puts.
type putCase struct {
	key  string
	data []byte
	meta map[string]string
}

// smallPuts are n objects of sizes 0 to 9 KiB in several directories,
// some with metadata and a content type, one in a directory whose name
// cannot travel in a header, and a directory marker, whose key MinIO's
// extraction would change (it goes alone).
func smallPuts(n int) []putCase {
	var cs []putCase
	for i := range n {
		c := putCase{
			key:  fmt.Sprintf("d%d/sub/f%04d", i%3, i),
			data: bytes.Repeat([]byte{byte(i)}, (i*97)%(9<<10)),
		}
		if i%2 == 0 {
			c.meta = map[string]string{"mode": fmt.Sprint(0o100600 + i%8), "uid": fmt.Sprint(1000 + i)}
		}
		if i%5 == 0 {
			if c.meta == nil {
				c.meta = map[string]string{}
			}
			c.meta[s3store.ContentTypeKey] = "text/x-objfuse"
		}
		cs = append(cs, c)
	}
	cs = append(cs,
		putCase{key: "dé/f", data: []byte("not ascii")},
		putCase{key: "marker/", data: []byte{}}, // a directory marker: goes alone
		putCase{key: "top", data: []byte("at the root")},
	)
	return cs
}

// prefixedPuts are n objects under one directory, so that batches of them
// name it in the prefix header: dir is sent whole, or its parent when
// dir ends with a space, which HTTP would trim from the header.
func prefixedPuts(dir string, n int) []putCase {
	var cs []putCase
	for i := range n {
		cs = append(cs, putCase{key: fmt.Sprintf("%sf%03d", dir, i), data: []byte(dir + fmt.Sprint(i))})
		if i%4 == 0 {
			cs = append(cs, putCase{key: fmt.Sprintf("%ssub/g%03d", dir, i), data: []byte("deeper")})
		}
	}
	return cs
}

// checkedStore is a store of bucket that has made its first request, so
// that it knows whether the server says it is MinIO.
func checkedStore(t testing.TB, cfg s3store.Config, bucket string) *s3store.Store {
	t.Helper()
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	return st
}

// putAll puts every case at once and fails the test on any error.
func putAll(t *testing.T, st *s3store.Store, cases []putCase) map[string]store.Object {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		got   = map[string]store.Object{}
		start = make(chan struct{})
	)
	for _, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			o, err := st.Put(t.Context(), c.key, bytes.NewReader(c.data), int64(len(c.data)), c.meta)
			if err != nil {
				t.Errorf("put %q: %v", c.key, err)
				return
			}
			mu.Lock()
			got[c.key] = o
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return got
}

// checkStored reads every case back from S3 with a plain client: bytes,
// user metadata and content type (a single PUT's default when none was
// set), and the ETag Put returned (which must be known with etags).
func checkStored(t *testing.T, c *minio.Client, bucket string, cases []putCase, returned map[string]store.Object, etags bool) {
	t.Helper()
	ctx := t.Context()
	for _, pc := range cases {
		obj, err := c.GetObject(ctx, bucket, pc.key, minio.GetObjectOptions{})
		if err != nil {
			t.Errorf("get %q: %v", pc.key, err)
			continue
		}
		data, err := io.ReadAll(obj)
		obj.Close()
		if err != nil || !bytes.Equal(data, pc.data) {
			t.Errorf("%q: %d bytes stored, want %d (%v)", pc.key, len(data), len(pc.data), err)
			continue
		}
		info, err := c.StatObject(ctx, bucket, pc.key, minio.StatObjectOptions{})
		if err != nil {
			t.Errorf("stat %q: %v", pc.key, err)
			continue
		}
		want := map[string]string{}
		if !strings.HasSuffix(pc.key, "/") { // servers type markers as they please
			want[s3store.ContentTypeKey] = "application/octet-stream"
		}
		for k, v := range pc.meta {
			want[k] = v
		}
		for k, v := range want {
			have := info.UserMetadata[http.CanonicalHeaderKey(k)]
			if k == s3store.ContentTypeKey {
				have = info.ContentType
			}
			if have != v {
				t.Errorf("%q: metadata %s is %q, want %q", pc.key, k, have, v)
			}
		}
		r := returned[pc.key]
		if (etags || r.ETag != "") && r.ETag != info.ETag {
			t.Errorf("%q: Put said ETag %q, S3 has %q", pc.key, r.ETag, info.ETag)
		}
		if age := time.Since(info.LastModified); age < -time.Minute || age > time.Hour {
			t.Errorf("%q: Last-Modified %v is not the server's time of the put", pc.key, info.LastModified)
		}
	}
}

// listKeys is every key in bucket, sorted.
func listKeys(t *testing.T, c *minio.Client, bucket string) []string {
	t.Helper()
	var keys []string
	for o := range c.ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	sort.Strings(keys)
	return keys
}

func keysOf(cases []putCase) []string {
	var keys []string
	seen := map[string]bool{}
	for _, c := range cases {
		if !seen[c.key] {
			seen[c.key] = true
			keys = append(keys, c.key)
		}
	}
	sort.Strings(keys)
	return keys
}

// Many small puts at once on MinIO share requests, and every object is
// stored as if put alone: its bytes, metadata, content type and ETag.
func TestConcurrentSmallPutsShareRequests(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	var puts atomic.Int32
	cfg := inspectingBatches(t, srv)
	cfg.Observe = func(op, status string, _ time.Duration) {
		if op == "PUT" || op == "PUT_BATCH" {
			puts.Add(1)
		}
	}
	st := checkedStore(t, cfg, bucket)
	var all []putCase
	// Some keys twice at once, with the same bytes: either put may end last.
	twice := smallPuts(300)
	twice = append(twice, twice[:40]...)
	for _, cases := range [][]putCase{twice, prefixedPuts("vol/data/", 200), prefixedPuts("vol/dir /", 200)} {
		puts.Store(0)
		returned := putAll(t, st, cases)
		checkStored(t, srv.Client(), bucket, cases, returned, true)
		if n := puts.Load(); n >= int32(len(cases))/2 {
			t.Errorf("%d objects took %d PUT requests: not batched", len(cases), n)
		}
		t.Logf("%d objects in %d PUT requests", len(cases), puts.Load())
		all = append(all, cases...)
	}
	if got, want := listKeys(t, srv.Client(), bucket), keysOf(all); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("bucket holds %d keys %v..., want %d", len(got), got[:min(5, len(got))], len(want))
	}

	// The store without batching sends a request per object.
	puts.Store(0)
	cfg.NoBatching = true
	alone := checkedStore(t, cfg, bucket)
	putAll(t, alone, all[:50])
	if n := puts.Load(); n != 50 {
		t.Errorf("without batching, 50 objects took %d PUT requests", n)
	}
}

// inspectingBatches fronts srv with a proxy that reads every batch on its
// way and fails the test if one names a key twice (MinIO stores a batch's
// objects in parallel: which would end last?) or gives an entry a time
// of its own (MinIO takes the entry's for Last-Modified, which orders a
// versioned bucket's versions, unless it is the epoch: then its clock).
func inspectingBatches(t *testing.T, srv *miniotest.Server) s3store.Config {
	t.Helper()
	target, _ := url.Parse(srv.Endpoint)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var sent atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Meta-Snowball-Auto-Extract") == "true" {
			if sent.Add(1) == 1 && !strings.HasPrefix(path.Base(r.URL.Path), ".objfuse-batch-probe-") {
				t.Errorf("the first batch went to %s, not to a probe key: had MinIO not extracted it, the tar would have replaced a file", r.URL.Path)
			}
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("read a batch: %v", err)
			}
			names := map[string]bool{}
			tr := tar.NewReader(bytes.NewReader(body))
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Errorf("a batch is not a tar: %v", err)
					break
				}
				if names[h.Name] {
					t.Errorf("a batch names %q twice", h.Name)
				}
				names[h.Name] = true
				if h.ModTime.Unix() > 0 {
					t.Errorf("batch entry %q has time %v: not the server's", h.Name, h.ModTime)
				}
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	cfg := srv.Config()
	cfg.Endpoint = front.URL
	return cfg
}

// Keys MinIO's extraction would store under another name go alone.
func TestBatchableKeys(t *testing.T) {
	for key, want := range map[string]bool{
		"a": true, "a/b/c": true, "dé/f": true, "a b/c ": true,
		"": false, ".": false, "..": false, "../a": false, "a/../b": false,
		"a/./b": false, "./a": false, "a//b": false, "/a": false, "a/": false,
		"a\x00b": false, "\xff": false,
	} {
		if got := s3store.Batchable(key); got != want {
			t.Errorf("Batchable(%q) = %v, want %v", key, got, want)
		}
	}
}

// sayingMinIO fronts endpoint with a proxy whose responses claim to come
// from MinIO, and counts the batches that pass through it.
func sayingMinIO(t *testing.T, cfg s3store.Config) (s3store.Config, *atomic.Int32) {
	t.Helper()
	target, err := url.Parse(cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var batches atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	direct := proxy.Director
	proxy.Director = func(r *http.Request) {
		direct(r)
		if r.Header.Get("X-Amz-Meta-Snowball-Auto-Extract") == "true" {
			batches.Add(1)
			// The server behind does not extract: a batch addressed to a
			// file's key would replace its content with the tar.
			if !strings.HasPrefix(path.Base(r.URL.Path), ".objfuse-batch-probe-") {
				t.Errorf("a batch to a server not known to extract went to %s, not to a probe key", r.URL.Path)
			}
		}
	}
	proxy.ModifyResponse = func(resp *http.Response) error {
		resp.Header.Set("Server", "MinIO")
		return nil
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	cfg.Endpoint = front.URL
	return cfg, &batches
}

// A server that says it is MinIO but stores a batch as one object (an
// old MinIO, or another server behind a proxy) gets no batch after the
// first ones, and every object ends as put alone, with no tar left.
func TestBatchesStoredAsTarsStopAndArePutAgain(t *testing.T) {
	vsrv, stop, err := versitytest.StartShared()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	bucket := vsrv.NewBucket(t)
	cfg, batches := sayingMinIO(t, vsrv.Config())
	st := checkedStore(t, cfg, bucket)
	c, err := s3store.NewClient(vsrv.Config())
	if err != nil {
		t.Fatal(err)
	}
	batchesStopAfter(t, st, c, bucket, batches, false, "found stored as a tar")
}

// batchesStopAfter puts small objects twice over, at once, through st:
// every object must end as put alone, and once the server has shown it
// does not take batches (why), none may go out after those in flight.
func batchesStopAfter(t *testing.T, st *s3store.Store, c *minio.Client, bucket string, batches *atomic.Int32, etags bool, why string) {
	t.Helper()
	cases := smallPuts(120)
	returned := putAll(t, st, cases)
	checkStored(t, c, bucket, cases, returned, etags)
	if got, want := listKeys(t, c, bucket), keysOf(cases); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("bucket holds %d keys, want %d", len(got), len(want))
	}
	first := batches.Load()
	if first == 0 {
		t.Fatal("no batch was sent: the test proves nothing")
	}
	if first > s3store.BatchSlots {
		t.Errorf("%d batches sent: more than were in flight when the first was %s", first, why)
	}
	putAll(t, st, cases)
	if n := batches.Load(); n != first {
		t.Errorf("%d more batches sent after the server's batch was %s", n-first, why)
	}
}

// A put queued for a batch whose caller gives up returns with its
// context's error and is not stored; the others queued with it are.
func TestQueuedPutsEndWithTheirContext(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	gate := make(chan struct{})
	var held atomic.Int32
	target, _ := url.Parse(srv.Endpoint)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			held.Add(1)
			<-gate
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release) // before front.Close, which waits for held requests
	cfg := srv.Config()
	cfg.Endpoint = front.URL
	st := checkedStore(t, cfg, bucket)
	put := func(ctx context.Context, key string) error {
		_, err := st.Put(ctx, key, bytes.NewReader([]byte(key)), int64(len(key)), nil)
		return err
	}
	// Fill every request slot with a put held by the proxy.
	errs := make(chan error, 16)
	const slots = s3store.BatchSlots
	for i := range slots {
		go func() { errs <- put(t.Context(), fmt.Sprintf("held%d", i)) }()
	}
	poll(t, 10*time.Second, "a held put in every slot", func() bool { return held.Load() == slots })
	queued := []string{"q/a", "q/b", "q/c"}
	for _, k := range queued {
		go func() { errs <- put(t.Context(), k) }()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := put(ctx, "q/given-up"); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("a queued put past its deadline returned %v", err)
	}
	if n := held.Load(); n != slots {
		t.Errorf("%d requests reached the server while every slot was held, want %d", n, slots)
	}
	release()
	for range slots + len(queued) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	var want []string
	for i := range slots {
		want = append(want, fmt.Sprintf("held%d", i))
	}
	want = append(want, queued...)
	if got := listKeys(t, srv.Client(), bucket); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("bucket holds %v, want %v", got, want)
	}
}

// BenchmarkSmallPuts: 4 KiB puts from 32 goroutines at once, as many
// asynchronous closes make them, by the raw minio-go client, by the
// store sending each alone, and by the store batching them.
func BenchmarkSmallPuts(b *testing.B) {
	srv := miniotest.Start(b)
	bucket := srv.NewBucket(b)
	body := bytes.Repeat([]byte("x"), 4096)
	var seq atomic.Int64
	key := func() string { return fmt.Sprintf("b/f%08d", seq.Add(1)) }
	run := func(b *testing.B, put func(key string) error) {
		b.SetParallelism(16) // × GOMAXPROCS goroutines
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := put(key()); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "files/s")
	}
	b.Run("raw-minio-go", func(b *testing.B) {
		c := srv.Client()
		run(b, func(k string) error {
			_, err := c.PutObject(b.Context(), bucket, k, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{DisableContentSha256: true})
			return err
		})
	})
	for _, alone := range []bool{true, false} {
		name := "objfuse-batched"
		if alone {
			name = "objfuse-alone"
		}
		b.Run(name, func(b *testing.B) {
			cfg := srv.Config()
			cfg.NoBatching = alone
			st := checkedStore(b, cfg, bucket)
			meta := map[string]string{"mode": "33188", "uid": "0", "gid": "0", "mtime": "1700000000"}
			run(b, func(k string) error {
				_, err := st.Put(b.Context(), k, bytes.NewReader(body), int64(len(body)), meta)
				return err
			})
		})
	}
}

// A server that refuses batches (NotImplemented: a gateway, a policy) is
// sent no more once it has: not even the puts that queued while the
// refused batches were on the wire. Every object is stored alone.
func TestRefusedBatchesStop(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	target, _ := url.Parse(srv.Endpoint)
	proxy := httputil.NewSingleHostReverseProxy(target)
	// A put alone waits for a token; a batch, for batchesGo.
	tokens, batchesGo := make(chan struct{}, 1000), make(chan struct{})
	var singles, batches atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("X-Amz-Meta-Snowball-Auto-Extract") == "true":
			batches.Add(1)
			io.Copy(io.Discard, r.Body)
			<-batchesGo
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusNotImplemented)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>A header you provided implies functionality that is not implemented</Message></Error>`)
			return
		case r.Method == http.MethodPut:
			singles.Add(1)
			<-tokens
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	letSingles := func(n int) {
		for range n {
			select {
			case tokens <- struct{}{}:
			default:
			}
		}
	}
	var openBatches sync.Once
	letBatches := func() { openBatches.Do(func() { close(batchesGo) }) }
	// Before front.Close, which waits for held requests.
	t.Cleanup(func() { letSingles(cap(tokens)) })
	t.Cleanup(letBatches)
	cfg := srv.Config()
	cfg.Endpoint = front.URL
	st := checkedStore(t, cfg, bucket)

	var wg sync.WaitGroup
	var cases []putCase
	wave := func(name string, n int) *sync.WaitGroup {
		var this sync.WaitGroup
		for i := range n {
			c := putCase{key: fmt.Sprintf("%s/f%02d", name, i), data: []byte(name + fmt.Sprint(i))}
			cases = append(cases, c)
			wg.Add(1)
			this.Add(1)
			go func() {
				defer wg.Done()
				defer this.Done()
				if _, err := st.Put(t.Context(), c.key, bytes.NewReader(c.data), int64(len(c.data)), nil); err != nil {
					t.Errorf("put %q: %v", c.key, err)
				}
			}()
		}
		return &this
	}
	// Two puts alone fill both slots, held; twenty queue behind them.
	first := wave("first", s3store.BatchSlots)
	poll(t, 10*time.Second, "the first puts to reach the server", func() bool { return singles.Load() == s3store.BatchSlots })
	wave("a", 20)
	poll(t, 10*time.Second, "20 puts to queue", func() bool { return s3store.QueuedPuts(st) == 20 })
	// Let the two through: one slot sends the queue as a batch, held.
	letSingles(s3store.BatchSlots)
	first.Wait()
	poll(t, 10*time.Second, "a batch", func() bool { return batches.Load() == 1 && s3store.QueuedPuts(st) == 0 })
	// The next wave's first put takes the other slot alone, held, and
	// the rest queue; let it through, and they follow as a second batch.
	wave("b", 20)
	poll(t, 10*time.Second, "19 puts to queue", func() bool { return s3store.QueuedPuts(st) == 19 })
	letSingles(1)
	poll(t, 10*time.Second, "a second batch", func() bool { return batches.Load() == 2 && s3store.QueuedPuts(st) == 0 })
	// Both slots hold batches; twenty more queue, then the server
	// refuses both batches.
	wave("c", 20)
	poll(t, 10*time.Second, "20 more puts to queue", func() bool { return s3store.QueuedPuts(st) == 20 })
	letSingles(cap(tokens)) // the refused batches' puts go alone
	letBatches()
	wg.Wait()
	checkStored(t, srv.Client(), bucket, cases, nil, false)
	if n := batches.Load(); n != 2 {
		t.Errorf("%d batches sent; want the 2 that were in flight when the server refused them", n)
	}
	batches.Store(0)
	putAll(t, st, smallPuts(50))
	if n := batches.Load(); n != 0 {
		t.Errorf("%d batches sent after the server refused them", n)
	}
}
