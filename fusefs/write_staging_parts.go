package fusefs

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/objfuse/objfuse/fusefs/store"
)

// stagedParts uploads the parts of a staging file that its writers have
// written whole while the file is still being written, so that its upload
// on close or fsync overlaps the writing rather than following it. Files
// the kernel writes back (the writeback cache: a file's pages come as
// several WRITEs at once, out of order) and files that outgrow the memory
// limit are staged on disk, where a WRITE is answered at disk speed; the
// close then sends only what is left, and completes the upload.
//
// A part is whole once every one of its bytes was written through the
// file since tracking began (the staging file's creation, or its last
// upload): a part of a copy loaded from S3 is sent early only once it is
// all rewritten. Any later change to a part sent (another WRITE, a
// journal's copy, an extension) counts, and the close sends it again
// under the same number, which S3 keeps instead. A shrinking truncate
// starts over (reset). Nothing is visible in the bucket before the close
// completes the upload, conditional on the version the staging file was
// loaded from, like a whole upload (see finish).
//
// Parts go up in the background, no more than Concurrency at a time; a
// WRITE never waits for one. A part that fails is left to the close,
// which sends it again and reports its failure, and no other part of the
// file is sent early: the store may be down.
type stagedParts struct {
	fsys     *FS
	f        io.ReaderAt // the staging file
	partSize int64
	// key, base and meta are what the upload starts with: the file's key,
	// the version it replaces and its metadata when its first part
	// became whole.
	key, base string
	meta      map[string]string

	started sync.Mutex // held while the upload is started
	upload  store.Upload
	// ctx is the early sends'; cancel ends them (discard), and the
	// mounter's stop too.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	parts    map[int]*stagedPart // by index, from 0
	inflight int
	halted   bool       // a part failed, or the upload ended: no more go up early
	idle     *sync.Cond // on mu: inflight fell
}

// stagedPart is what is known of one part.
type stagedPart struct {
	covered spans // written since tracking began, until whole
	whole   bool
	// scattered: written in more pieces apart than maxSpans, and no
	// longer tracked (it goes up at the close): random small writes
	// must not make the record of what they wrote grow without bound.
	scattered bool
	// changes counts the changes made to the part once it was whole;
	// sent is what it counted when the part last went up in full
	// (partSize bytes), -1 if it never did.
	changes, sent int
	sending       bool
}

// maxSpans bounds the pieces a part's record of what was written holds.
const maxSpans = 64

// earlyUpload is where a staged file's parts go: its key, the version it
// replaces and its metadata, now.
type earlyUpload func() (key, base string, meta map[string]string, ok bool)

func (f *FS) newStagedParts(file io.ReaderAt) *stagedParts {
	sp := &stagedParts{fsys: f, f: file, partSize: int64(f.opts.PartSize), parts: map[int]*stagedPart{}}
	sp.idle = sync.NewCond(&sp.mu)
	sp.ctx, sp.cancel = f.uploadContext(context.Background())
	return sp
}

// part returns part i's record, new if there is none.
func (sp *stagedParts) part(i int) *stagedPart {
	p := sp.parts[i]
	if p == nil {
		p = &stagedPart{sent: -1}
		sp.parts[i] = p
	}
	return p
}

// changed notes that size bytes at off changed: a part sent must go up
// again. Safe on nil (a file not tracked).
func (sp *stagedParts) changed(off, size int64) {
	if sp == nil || size <= 0 {
		return
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for i := int(off / sp.partSize); int64(i)*sp.partSize < off+size; i++ {
		if p := sp.parts[i]; p != nil && p.whole {
			p.changes++
		}
	}
}

// written notes that a writer wrote size bytes at off (after changed),
// and starts the upload of the parts this made whole. where says where
// the file goes; it is asked once, for the first part.
func (sp *stagedParts) written(off, size int64, where earlyUpload) {
	if size <= 0 {
		return
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.halted {
		return
	}
	for i := int(off / sp.partSize); int64(i)*sp.partSize < off+size; i++ {
		if i >= sp.fsys.maxParts {
			sp.halted = true // the close sends larger parts than these
			return
		}
		p := sp.part(i)
		if p.whole || p.scattered {
			continue
		}
		start := int64(i) * sp.partSize
		lo, hi := max(off, start)-start, min(off+size, start+sp.partSize)-start
		if p.covered.add(lo, hi) < sp.partSize {
			if len(p.covered.r) > maxSpans {
				p.scattered, p.covered = true, spans{}
			}
			continue
		}
		p.whole, p.covered = true, spans{}
		if sp.key == "" {
			key, base, meta, ok := where()
			if !ok {
				sp.halted = true
				return
			}
			sp.key, sp.base, sp.meta = key, base, meta
		}
	}
	sp.sendWholeLocked()
}

// sendWholeLocked starts uploads of whole parts never sent, lowest first,
// while fewer than Concurrency are in flight. A part sent and changed
// since is left to the close: a writer may still be at it.
func (sp *stagedParts) sendWholeLocked() {
	for sp.inflight < sp.fsys.opts.Concurrency && !sp.halted {
		next := -1
		for i, p := range sp.parts {
			if p.whole && p.sent < 0 && !p.sending && (next < 0 || i < next) {
				next = i
			}
		}
		if next < 0 {
			return
		}
		p := sp.parts[next]
		p.sending = true
		sp.inflight++
		go sp.send(next, p.changes)
	}
}

// send uploads part i in the background; changes is what it counted when
// the upload began.
func (sp *stagedParts) send(i, changes int) {
	err := sp.put(sp.ctx, i, sp.partSize)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	p := sp.parts[i]
	p.sending = false
	sp.inflight--
	switch {
	case err == nil:
		p.sent = changes
		sp.fsys.stats.EarlyParts.Add(1)
	case p.changes == changes:
		// A part changed meanwhile may have failed its checksum; it goes
		// up again on close either way. Any other failure is the
		// store's: the close finds out.
		sp.halted = true
		sp.fsys.opts.Logger.Debug("an early part upload failed; the close sends it again", "key", sp.key, "part", i+1, "err", err)
	}
	sp.idle.Broadcast()
	sp.sendWholeLocked()
}

// put sends size bytes of part i, first starting the upload if no part
// has.
func (sp *stagedParts) put(ctx context.Context, i int, size int64) error {
	sp.started.Lock()
	if sp.upload == nil {
		u, err := sp.fsys.store.NewUpload(ctx, sp.key, sp.base, sp.meta)
		if err != nil {
			sp.started.Unlock()
			return err
		}
		sp.upload = u
	}
	u := sp.upload
	sp.started.Unlock()
	return u.PutPart(ctx, i+1, io.NewSectionReader(sp.f, int64(i)*sp.partSize, size), size)
}

// settle stops early uploads and waits for those in flight.
func (sp *stagedParts) settle() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.halted = true
	for sp.inflight > 0 {
		sp.idle.Wait()
	}
}

// finish stores the file, size bytes, as key replacing version base: the
// parts not sent yet go up, up to Concurrency at a time, and the upload
// completes. It returns the metadata the upload began with, which the
// object has; nil (and no error) when no upload began that fits, for the
// caller to store the file whole. Either way tracking ends: the caller
// starts it over for the writes that follow.
func (sp *stagedParts) finish(ctx context.Context, key, base string, size int64) (store.Object, map[string]string, error) {
	sp.settle()
	sp.cancel()
	last := int((size - 1) / sp.partSize)
	fits := sp.upload != nil && key == sp.key && base == sp.base && size > sp.partSize && last < sp.fsys.maxParts
	for i, p := range sp.parts {
		fits = fits && (i <= last || p.sent < 0) // no part past the end went up
	}
	if !fits {
		sp.discard()
		return store.Object{}, nil, nil
	}
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	slots := make(chan struct{}, sp.fsys.opts.Concurrency)
	var wg sync.WaitGroup
	for i := 0; i <= last; i++ {
		n := min(sp.partSize, size-int64(i)*sp.partSize)
		if p := sp.parts[i]; p != nil && p.whole && p.sent == p.changes && n == sp.partSize {
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if ctx.Err() != nil {
				return
			}
			if err := sp.put(ctx, i, n); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	err := context.Cause(ctx)
	var o store.Object
	if err == nil {
		o, err = sp.upload.Complete(ctx)
	}
	if err != nil {
		sp.abortAfter(parent)
		return store.Object{}, nil, err
	}
	sp.upload = nil
	return o, sp.meta, nil
}

// discard ends tracking, without waiting: the parts in flight are cut,
// and once they end an upload begun is aborted in the background.
func (sp *stagedParts) discard() {
	if sp == nil {
		return
	}
	sp.cancel()
	go func() {
		sp.settle()
		sp.started.Lock()
		u := sp.upload
		sp.upload = nil
		sp.started.Unlock()
		if u != nil {
			abortUpload(sp.fsys, u, sp.key, false)
		}
	}()
}

// abortAfter aborts the upload after a failure under ctx: when ctx has
// ended (the mounter stops), in the background, so that the failure is
// reported first, within the stop deadline.
func (sp *stagedParts) abortAfter(ctx context.Context) {
	abortUpload(sp.fsys, sp.upload, sp.key, ctx.Err() != nil)
	sp.upload = nil
}

// stagedWriteLocked notes a writer's write of size bytes at off to the
// staging file, whose parts then go up as they are written whole: those
// of a file that has a name, where it will be uploaded.
func (n *fileNode) stagedWriteLocked(off, size int64) {
	if n.unlinked {
		return
	}
	n.staging.written(off, size, func() (string, string, map[string]string, bool) {
		key, err := n.linkedKey()
		if err != nil || n.unlinked {
			return "", "", nil, false
		}
		return key, n.base, n.streamMetaLocked(), true
	})
}

// storeStagingLocked stores the staging file, size bytes, as key: by
// completing the upload its parts went up early in, else whole
// (uploadStaging), which is also where another writer's change is found
// and kept apart. a is what the file's attributes become.
func (n *fileNode) storeStagingLocked(ctx context.Context, key string, size int64, meta map[string]string, a *attrs) (store.Object, error) {
	sp := n.staging.parts
	n.staging.parts = nil // tracking starts over for later writes
	if sp == nil {
		return n.uploadStaging(ctx, key, size, meta)
	}
	o, began, err := sp.finish(ctx, key, n.base, size)
	switch {
	case errors.Is(err, store.ErrChanged):
		// Another writer's version, or one this mount made since.
		return n.keepApartLocked(ctx, key, size, meta, o, err)
	case errors.Is(err, store.ErrNotExist):
		// The object deleted, or the upload gone: the whole upload
		// finds out which.
		return n.uploadStaging(ctx, key, size, meta)
	case err != nil:
		return store.Object{}, err
	case began == nil:
		return n.uploadStaging(ctx, key, size, meta)
	}
	// The content is stored: should storing the metadata set meanwhile
	// fail, the next try goes on from this version, not against it.
	n.base = o.ETag
	n.own.note(o.ETag)
	return n.settleStreamedMetaLocked(ctx, key, o, began, a)
}
