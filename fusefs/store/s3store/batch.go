package s3store

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store"
)

// Small objects put at the same time go to MinIO in one request: a tar of
// them with MinIO's auto-extract header (its "snowball" upload), which it
// stores as the separate objects. Most of what a small PUT costs MinIO is
// the request, not the bytes: measured here, 0.6–1.6 ms of its CPU per
// 4 KiB PUT (32 at a time), 0.5–0.7 ms per object in batches of 64, and
// about twice the objects per second (BenchmarkSmallPuts). Only
// puts that would otherwise wait for a request slot are batched, so a lone
// writer's close costs what it did; many closes at once (untar, a build,
// an asynchronous close of each of many files) share requests.
//
// Only a server that says it is MinIO is sent batches, and the first batch
// is checked: a server that stored the tar as an object instead of
// extracting it is sent no more, and the batch's objects are put again one
// by one.
const (
	// batchSlots is how many small-object requests run at once before
	// further puts queue for the next batch.
	batchSlots = 2
	// batchMaxObjects and batchMaxBytes bound one batch.
	batchMaxObjects = 128
	batchMaxBytes   = 8 << 20
	// BatchMaxObjectSize is the largest object sent in a batch: larger
	// ones cost MinIO far more to store than to receive.
	BatchMaxObjectSize = 256 << 10

	snowballExtract = "X-Amz-Meta-Snowball-Auto-Extract"
	snowballPrefix  = "X-Amz-Meta-Minio-Snowball-Prefix"
)

// batchItem is one small put waiting for, or in, a batch.
type batchItem struct {
	ctx  context.Context
	key  string
	body []byte
	meta map[string]string
	// done is closed once the item's batch has ended: with stored (its
	// object is in S3, with etag and mtime), or with err (the item was
	// sent alone and failed), or with neither (the batch failed: the
	// item is to be put alone).
	done   chan struct{}
	taken  bool
	stored bool
	err    error
	etag   string
	mtime  time.Time
}

// batcher queues small puts while batchSlots requests are in flight and
// sends what queued as one request when a slot frees.
type batcher struct {
	s *Store

	mu       sync.Mutex
	queue    []*batchItem
	inflight int
	// off: the server cannot extract (or refused a batch); verified: a
	// batch was seen extracted; md5ETags: its objects' ETags are the MD5
	// of their bytes (not so with server-side encryption).
	off, verified, md5ETags bool
}

// batchable reports whether key survives MinIO's extraction unchanged:
// it cleans each tar entry's path and joins it to the batch's prefix.
func batchable(key string) bool {
	return key != "" && utf8.ValidString(key) && !strings.ContainsRune(key, 0) &&
		!strings.HasPrefix(key, "/") && path.Clean(key) == key &&
		key != "." && key != ".." && !strings.HasPrefix(key, "../")
}

// enabled reports whether puts may be batched now: the server said it is
// MinIO, and no batch has shown that it does not extract them.
func (b *batcher) enabled() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.off && b.s.isMinIO.Load()
}

// slot takes a request slot if one is free and nothing queues for it.
func (b *batcher) slot() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inflight < batchSlots && len(b.queue) == 0 {
		b.inflight++
		return true
	}
	return false
}

// put stores a small object, in a batch if requests are queueing.
func (b *batcher) put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	if b.slot() {
		defer b.release()
		return b.s.putOne(ctx, key, r, size, meta)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return store.Object{}, fmt.Errorf("put %q: read the body: %w", key, err)
	}
	it := &batchItem{ctx: ctx, key: key, body: body, meta: meta, done: make(chan struct{})}
	b.enqueue(it)
	select {
	case <-it.done:
	case <-ctx.Done():
		// Out of the queue, the put below fails at once with ctx's error,
		// as an unbatched put would; a batch on the wire ends with ctx
		// (send).
		if !b.withdraw(it) {
			<-it.done
		}
	}
	switch {
	case it.stored:
		return store.Object{Key: key, Size: size, ETag: it.etag, LastModified: it.mtime, Metadata: lower(meta)}, nil
	case it.err != nil:
		return store.Object{}, it.err
	}
	return b.s.putOne(ctx, key, bytes.NewReader(body), size, meta)
}

// enqueue queues it, and sends a batch at once should a slot have freed
// since put looked.
func (b *batcher) enqueue(it *batchItem) {
	b.mu.Lock()
	b.queue = append(b.queue, it)
	var batch []*batchItem
	if b.inflight < batchSlots {
		batch = b.takeLocked()
	}
	b.mu.Unlock()
	if batch != nil {
		go b.send(batch)
	}
}

// withdraw takes it out of the queue unless a batch has taken it.
func (b *batcher) withdraw(it *batchItem) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if it.taken {
		return false
	}
	for i, q := range b.queue {
		if q == it {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			return true
		}
	}
	return false
}

// release frees a request slot and starts a batch of what queued.
func (b *batcher) release() {
	b.mu.Lock()
	b.inflight--
	batch := b.takeLocked()
	b.mu.Unlock()
	if batch != nil {
		go b.send(batch)
	}
}

// takeLocked takes a slot and the next batch from the queue: in order,
// at most one item per key (MinIO stores a batch's objects in parallel,
// so two puts of a key in one batch would end in either order).
func (b *batcher) takeLocked() []*batchItem {
	if len(b.queue) == 0 {
		return nil
	}
	var batch []*batchItem
	keys := map[string]bool{}
	size := 0
	rest := b.queue[:0]
	for _, it := range b.queue {
		full := len(batch) == batchMaxObjects || (len(batch) > 0 && size+len(it.body) > batchMaxBytes)
		if full || keys[it.key] {
			// A later put of the same key waits too: it must land last.
			keys[it.key] = true
			rest = append(rest, it)
			continue
		}
		it.taken = true
		keys[it.key] = true
		size += len(it.body)
		batch = append(batch, it)
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	b.inflight++
	return batch
}

// send stores batch and tells its items, then frees its slot.
func (b *batcher) send(batch []*batchItem) {
	defer b.release()
	defer func() {
		for _, it := range batch {
			close(it.done)
		}
	}()
	if !b.enabled() {
		// Turned off since these queued: each puts itself.
		return
	}
	if len(batch) == 1 {
		// Not worth a tar.
		it := batch[0]
		o, err := b.s.putOne(it.ctx, it.key, bytes.NewReader(it.body), int64(len(it.body)), it.meta)
		it.stored, it.err, it.etag, it.mtime = err == nil, err, o.ETag, o.LastModified
		return
	}
	// The batch ends as soon as any of its puts' contexts does: each
	// caller's deadline bounds its own wait, and the others are put
	// alone after.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	for _, it := range batch {
		stop := context.AfterFunc(it.ctx, func() { cancel(context.Cause(it.ctx)) })
		defer stop()
	}
	// Until a batch was seen extracted, the request goes to a key no file
	// has (probeKey): a server that ignores the extract header stores the
	// tar there, not over a file's content.
	b.mu.Lock()
	key := batch[0].key
	if !b.verified {
		key = probeKey(key)
	}
	b.mu.Unlock()
	wctx, done := watchProgress(ctx, b.s.stallTimeout())
	err := b.s.putBatch(wctx, batch, key)
	done()
	if err != nil && key != batch[0].key {
		// A server that stores tars may have stored this one before the
		// batch failed (a reply lost, a stall): the probe goes.
		go b.dropProbe(key)
	}
	if err != nil {
		b.s.cfg.logger().Warn("a batch of small objects failed; putting them one by one", "objects", len(batch), "err", err)
		if refusesBatches(err) {
			b.turnOff()
		}
		return
	}
	if !b.checkExtracted(ctx, batch[0], key) {
		return
	}
	b.mu.Lock()
	md5ETags := b.md5ETags
	b.mu.Unlock()
	for _, it := range batch {
		it.stored = true
		if !md5ETags {
			it.etag = "" // unknown: the next listing or HEAD tells
		}
	}
}

// refusesBatches reports whether a batch's failure says that the server
// will not take batches (a policy, an older server), rather than that it
// failed to store this one (MinIO's BadRequest, for any object of the
// batch it could not store).
func refusesBatches(err error) bool {
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return false
	}
	switch resp.Code {
	case "AccessDenied", "NotImplemented", "MethodNotAllowed":
		return true
	}
	return false
}

func (b *batcher) turnOff() {
	b.mu.Lock()
	b.off = true
	b.mu.Unlock()
}

// checkExtracted asks, after the first batch, whether the server stored
// the tar itself at the request's key (a probe key: see send) rather than
// the batch's objects, and whether objects' ETags are the MD5 of their
// bytes.
func (b *batcher) checkExtracted(ctx context.Context, first *batchItem, key string) bool {
	b.mu.Lock()
	verified := b.verified
	b.mu.Unlock()
	if verified {
		return true
	}
	if key != first.key {
		_, err := b.s.Head(ctx, key)
		if !errors.Is(err, store.ErrNotExist) {
			// Stored as a tar, or nothing known either way: the probe goes,
			// and the objects are put one by one this time.
			b.dropProbe(key)
			if err == nil {
				b.s.cfg.logger().Warn("the server stored a batch of small objects as one object instead of extracting it; sending no more batches", "key", key)
				b.turnOff()
			}
			return false
		}
	}
	o, err := b.s.Head(ctx, first.key)
	if err != nil {
		// Nothing known either way: put them one by one this time.
		return false
	}
	if o.Size != int64(len(first.body)) {
		b.s.cfg.logger().Warn("the server stored a batch of small objects as one object instead of extracting it; sending no more batches", "key", first.key)
		b.turnOff()
		return false
	}
	b.mu.Lock()
	b.verified, b.md5ETags = true, o.ETag == first.etag
	b.mu.Unlock()
	return true
}

// probeTimeout bounds the delete of a batch's probe object, which no
// caller's interrupt stops.
const probeTimeout = time.Minute

// dropProbe deletes a batch's probe object, if the server stored one.
// Its failure is not news for Health: the batch's own was noted, and
// this cleanup, running after the caller went on, would otherwise
// report a deleted bucket after a request that worked since (a bucket
// made again) had cleared it.
func (b *batcher) dropProbe(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	err := b.s.client.RemoveObject(ctx, b.s.bucket, key, minio.RemoveObjectOptions{})
	if err != nil && !errors.Is(mapErr(err), store.ErrNotExist) {
		b.s.cfg.logger().Warn("could not delete a batch's probe object", "key", key, "err", err)
	}
}

// probeKey is a key beside key that no file has: a hidden name in the same
// directory (a bucket policy that lets the mount put key lets it put this).
func probeKey(key string) string {
	var r [8]byte
	rand.Read(r[:])
	return key[:strings.LastIndex(key, "/")+1] + ".objfuse-batch-probe-" + hex.EncodeToString(r[:])
}

// putBatch sends batch as one tar that MinIO extracts. Every entry is
// named relative to the keys' common directory, which goes in the prefix
// header: MinIO checks the caller's right to put under that prefix (a
// policy may allow puts only under the mount's prefix), then each key.
func (s *Store) putBatch(ctx context.Context, batch []*batchItem, key string) error {
	prefix := commonDir(batch)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	sent := time.Now().UTC()
	for _, it := range batch {
		sum := md5.Sum(it.body)
		it.etag, it.mtime = hex.EncodeToString(sum[:]), sent
		h := tar.Header{
			Typeflag: tar.TypeReg,
			Name:     strings.TrimPrefix(it.key, prefix),
			Size:     int64(len(it.body)),
			Mode:     0o644,
			// An entry's time becomes its object's Last-Modified, which
			// also orders a versioned bucket's versions: the epoch makes
			// MinIO take its own clock, as for a single PUT, rather than
			// this one's.
			ModTime:    time.Unix(0, 0),
			Format:     tar.FormatPAX,
			PAXRecords: map[string]string{},
		}
		// The headers a single put of it would send.
		one := s.putOptions(it.meta)
		if one.ContentType == "" {
			// minio-go's default for a single PUT; MinIO's own differs.
			one.ContentType = "application/octet-stream"
		}
		h.PAXRecords["minio.metadata.Content-Type"] = one.ContentType
		for k, v := range one.UserMetadata {
			h.PAXRecords["minio.metadata.X-Amz-Meta-"+k] = v
		}
		if err := tw.WriteHeader(&h); err != nil {
			return fmt.Errorf("batch: %q: %w", it.key, err)
		}
		if _, err := tw.Write(it.body); err != nil {
			return fmt.Errorf("batch: %q: %w", it.key, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	body := bytes.NewReader(buf.Bytes())
	opts := minio.PutObjectOptions{
		UserMetadata: map[string]string{
			snowballExtract: "true",
			// The whole tar is checked, as a single put's body is.
			checksumHeader: crc32cBase64(crc32.Checksum(buf.Bytes(), castagnoli)),
		},
		DisableContentSha256: true,
	}
	if prefix != "" {
		opts.UserMetadata[snowballPrefix] = strings.TrimSuffix(prefix, "/")
	}
	// MinIO stores the entries and nothing at the request's own key; a
	// server that ignored the extract header would store the tar there.
	_, err := s.core.PutObject(ctx, s.bucket, key, body, int64(body.Len()), "", "", opts)
	if err != nil {
		return fmt.Errorf("batch of %d objects: %w", len(batch), err)
	}
	return nil
}

// commonDir is the longest directory ("a/b/") holding every key of batch
// that travels in a header unchanged: printable ASCII, and (as HTTP trims
// header values) neither starting nor ending with a space; else "".
func commonDir(batch []*batchItem) string {
	parent := func(dir string) string {
		return dir[:strings.LastIndexByte(strings.TrimSuffix(dir, "/"), '/')+1]
	}
	dir := batch[0].key[:strings.LastIndexByte(batch[0].key, '/')+1]
	for _, it := range batch[1:] {
		for !strings.HasPrefix(it.key, dir) {
			dir = parent(dir)
		}
	}
	for i := 0; i < len(dir); i++ {
		if dir[i] < 0x20 || dir[i] > 0x7e {
			return ""
		}
	}
	for dir != "" && strings.TrimSpace(strings.TrimSuffix(dir, "/")) != strings.TrimSuffix(dir, "/") {
		dir = parent(dir)
	}
	return dir
}
