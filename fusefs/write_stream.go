package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
)

// smallFileLimit is how far a new file grows in an ordinary slice before
// it takes a part-sized buffer from the pool: most files are small, and a
// 4 KiB file must not pin 8 MiB.
const smallFileLimit = 1 << 20

// firstBufferWait bounds how long a new stream waits for memory before it
// falls back to a staging file on disk.
const firstBufferWait = 2 * time.Second

// errNoMemory tells the caller to continue the file on disk instead.
var errNoMemory = errors.New("no memory for another upload buffer")

// stream uploads a file written sequentially from offset 0 as it is
// written: parts of PartSize go up in parallel while the writer fills the
// next one. Nothing becomes visible in the bucket until finish completes
// the upload; abort leaves nothing behind.
type stream struct {
	fsys *FS
	key  func() (string, error) // the file's key now: it moves with renames

	buf    []byte  // the part being filled
	pooled *[]byte // buf's backing buffer when it came from the pool
	// held is what buf takes of the memory limit while it is not pooled:
	// all of its capacity.
	held   int64
	size   int64 // bytes written so far
	upload store.Upload
	// uploadKey is the key upload was started under: a rename since
	// then moves the object once it is complete.
	uploadKey string
	// uploadMeta is the metadata upload was started with: the object's,
	// as S3 fixes a multipart upload's metadata when it begins.
	uploadMeta map[string]string
	part       int // parts sent

	// spool holds the part being filled once parts outgrow PartSize (past
	// nine tenths of S3's part count, see store.GrowingPartSize): a
	// staging file, so that memory stays within the limit however large
	// the parts get. spoolLen bytes of it are the part's.
	spool    *stagingFile
	spoolLen int64

	// inflight are parts being uploaded; each holds its buffer or spool
	// file until done.
	inflight []*partUpload
	mu       sync.Mutex
	err      error
}

type partUpload struct {
	buf  *[]byte      // a part sent from memory, or
	file *stagingFile // one sent from a spool file
	done chan struct{}
	// failed: its upload returned an error, after which the HTTP
	// transport may still be reading the body (net/http's RoundTripper
	// allows it), so the buffer goes back late (free).
	failed bool
}

// failedPartLinger is how long the buffer of a part whose upload failed
// stays out of the pool: a transport still writing the body must find it
// mapped, not reused or unmapped.
const failedPartLinger = time.Minute

func (f *FS) newStream(key func() (string, error)) *stream { return &stream{fsys: f, key: key} }

func (s *stream) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// write appends p and returns how much of it was taken: all of it, or
// (with the error) what fit before the file reached the most S3 takes in
// one object (EFBIG) or the staging disk filled (ENOSPC). It returns
// errNoMemory (with nothing written) when the stream cannot get a buffer;
// the caller then moves the file to staging.
func (s *stream) write(ctx context.Context, p []byte, meta map[string]string) (int, error) {
	if err := s.failed(); err != nil {
		return 0, err
	}
	partSize := s.fsys.opts.PartSize
	written := 0
	for len(p) > 0 {
		limit := s.partLimit(s.part + 1)
		room := min(limit-s.partLen(), store.MaxObjectSize-s.size)
		if room == 0 {
			// Only the last part S3 allows is ever left full (it goes up
			// on close), or the object is as large as S3 takes.
			return written, syscall.EFBIG
		}
		n := int(min(int64(len(p)), room))
		if s.spool == nil && limit <= int64(partSize) && s.fillsOnDisk(n) {
			// Without room on disk, the part fills in memory.
			if err := s.startSpool(limit); err != nil {
				return written, err
			}
		}
		if s.spool != nil || limit > int64(partSize) {
			if err := s.writeSpool(p[:n]); err != nil {
				return written, err
			}
		} else if err := s.writeBuffer(ctx, p[:n]); err != nil {
			return written, err
		}
		p = p[n:]
		written += n
		s.size += int64(n)
		if s.partLen() == limit && s.part+1 < s.fsys.maxParts {
			if err := s.sendPart(ctx, meta); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// partLimit is the size of part number: PartSize, growing once the
// upload nears S3's part count so that large files fit. The larger parts
// are spooled on disk; one stream's spool (Concurrency parts in flight
// and one being filled) takes at most half the staging limit, so other
// files can still be staged. A smaller staging limit means a smaller
// largest file: EFBIG at the last part.
func (s *stream) partLimit(number int) int64 {
	o := s.fsys.opts
	largest := o.StagingLimit / 2 / int64(o.Concurrency+1) &^ (1<<20 - 1)
	return store.GrowingPartSize(number, s.fsys.maxParts, int64(o.PartSize), largest)
}

// partLen is how much of the part being filled is written.
func (s *stream) partLen() int64 {
	if s.spool != nil {
		return s.spoolLen
	}
	return int64(len(s.buf))
}

// writeBuffer appends p (no more than the part's room) to the part in
// memory.
func (s *stream) writeBuffer(ctx context.Context, p []byte) error {
	// Past a small file's buffer, or for a part after the first (one a
	// small memory limit's stream fills in memory: Options.partsOnDisk),
	// the part takes a pooled buffer.
	if s.pooled == nil && (s.upload != nil || len(s.buf)+len(p) > smallFileLimit) {
		b := s.fsys.partBuffers().getForWrite(ctx)
		if b == nil {
			if s.upload == nil {
				return errNoMemory
			}
			// Reuse our own oldest part's buffer once it is sent.
			b = s.reclaim()
			if b == nil {
				if err := s.failed(); err != nil {
					return err
				}
				// No part to wait for: a small memory limit's part
				// (Options.partsOnDisk) that found neither room on disk
				// nor memory. Going on in staging would complete the
				// upload half written, and need the room that is not
				// there.
				return fmt.Errorf("no room on disk or in memory for part %d: %w", s.part+1, syscall.ENOSPC)
			}
		}
		s.pooled = b
		s.buf = append((*b)[:0], s.buf...)
		s.freeSmall()
	}
	if s.pooled == nil {
		if err := s.growSmall(ctx, len(s.buf)+len(p)); err != nil {
			return err
		}
	}
	s.buf = append(s.buf, p...)
	return nil
}

// fillsOnDisk reports whether the part being filled, about to take n
// more bytes, goes on in a spool file: under a memory limit too small
// for parts in memory (Options.partsOnDisk), a part from its start once
// the upload began, and the first part once it outgrows a small file's
// buffer. A part that began in a pooled buffer ends there.
func (s *stream) fillsOnDisk(n int) bool {
	if s.pooled != nil || !s.fsys.opts.partsOnDisk() {
		return false
	}
	if s.upload != nil {
		return s.partLen() == 0
	}
	return len(s.buf)+n > smallFileLimit
}

// startSpool moves the part being filled to a new spool file once the
// staging area has room for a whole part of size: the stream's own parts
// in flight give theirs back as they end, and are waited for first, so
// that a part fills in memory only while other files hold the room. A
// part after the first keeps that room, and the writes filling it never
// find the disk full; the first takes only what it holds, as a staged
// file does, for a file held open short of a part must not hold a whole
// one. What the part holds in memory goes with it. It returns the error
// of a part that failed meanwhile.
func (s *stream) startSpool(size int64) error {
	for !s.fsys.stagingHasRoom(size) {
		if len(s.inflight) == 0 {
			return nil
		}
		if err := s.retireOldest(); err != nil {
			return err
		}
	}
	room := int64(0) // the first part's: what it holds
	if s.upload != nil {
		room = size
	}
	st, err := s.bufferStaged(room)
	if err != nil {
		// Another file took the room meanwhile, or no file was made.
		s.fsys.opts.Logger.Debug("no spool file for a part: it fills in memory", "err", err)
		return nil
	}
	s.spool, s.spoolLen = st, int64(len(s.buf))
	s.buf = nil
	s.freeSmall()
	return nil
}

// staged gives the content of a stream no part of which went up as a
// staging file: its spool handed over, cut to the file's length, or a
// new one with its buffer. The stream keeps nothing of it.
func (s *stream) staged() (*stagingFile, error) {
	if s.spool == nil {
		return s.bufferStaged(0)
	}
	// A write the disk took only part of may have left bytes past the
	// content.
	st := s.spool
	if err := st.f.Truncate(s.spoolLen); err != nil {
		return nil, fmt.Errorf("cut a spooled part to its length: %w", err)
	}
	st.keepRoomFor(s.spoolLen)
	s.spool, s.spoolLen = nil, 0
	return st, nil
}

// bufferStaged makes a staging file of what the stream holds in memory,
// with room for size bytes taken first.
func (s *stream) bufferStaged(size int64) (*stagingFile, error) {
	st, err := s.fsys.newStaging()
	if err != nil {
		return nil, err
	}
	if err := st.reserve(size); err != nil {
		st.Close()
		return nil, err
	}
	if err := st.WriteAt(s.buf, 0); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// writeSpool appends p to the part being filled on disk.
func (s *stream) writeSpool(p []byte) error {
	if s.spool == nil {
		st, err := s.fsys.newStaging()
		if err != nil {
			return err
		}
		s.spool, s.spoolLen = st, 0
	}
	for {
		err := s.spool.WriteAt(p, s.spoolLen)
		if _, full := noRoom(err); full && len(s.inflight) > 0 {
			// Parts going up give their room back: wait for the oldest.
			if err := s.retireOldest(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		s.spoolLen += int64(len(p))
		return nil
	}
}

// smallFileUnit rounds what a small file's buffer takes of the memory
// limit, so that growing it byte by byte does not ask for memory each time.
const smallFileUnit = 4 << 10

// growSmall makes room for need bytes (at most smallFileLimit) in a
// buffer that is not pooled, counted against the memory limit: a file's
// bytes stay in memory until it is uploaded, and many files at once (held
// open, or closed faster than they upload) must not take more than the
// limit between them. It returns errNoMemory when the limit has no room;
// the file then continues on disk.
func (s *stream) growSmall(ctx context.Context, need int) error {
	if need <= cap(s.buf) {
		return nil
	}
	size := min(max(need, 2*cap(s.buf)), smallFileLimit)
	size = (size + smallFileUnit - 1) &^ (smallFileUnit - 1)
	grow := int64(size - cap(s.buf))
	if !s.fsys.reserveWritten(ctx, grow) {
		return errNoMemory
	}
	b := make([]byte, len(s.buf), size)
	copy(b, s.buf)
	s.buf, s.held = b, s.held+grow
	return nil
}

// freeSmall gives back what a buffer that was not pooled held.
func (s *stream) freeSmall() {
	if s.held > 0 {
		s.fsys.release(s.held)
		s.held = 0
	}
}

// sendPart starts the upload of the part being filled. A part in memory
// gives the stream a new buffer, from the pool if memory allows, else its
// own oldest part's buffer once that part is sent; a part in a spool file
// waits until fewer than Concurrency parts are in flight (they take disk,
// not memory). Per-file parallelism is Concurrency.
func (s *stream) sendPart(ctx context.Context, meta map[string]string) error {
	if s.upload == nil {
		key, err := s.key()
		if err != nil {
			return err
		}
		u, err := s.fsys.store.NewUpload(ctx, key, store.AnyVersion, meta)
		if err != nil {
			return err
		}
		s.upload, s.uploadKey, s.uploadMeta = u, key, meta
	}
	p := &partUpload{done: make(chan struct{})}
	var body io.ReaderAt
	var size int64
	if s.spool != nil {
		for len(s.inflight) >= s.fsys.opts.Concurrency {
			if err := s.retireOldest(); err != nil {
				return err
			}
		}
		p.file, body, size = s.spool, s.spool.f, s.spoolLen
		s.spool, s.spoolLen = nil, 0
	} else {
		p.buf, body, size = s.pooled, bytes.NewReader(s.buf), int64(len(s.buf))
		s.buf, s.pooled = nil, nil
	}
	s.part++
	number, upload := s.part, s.upload
	s.inflight = append(s.inflight, p)
	go func() {
		defer close(p.done)
		// Parts outlive the FUSE request that filled them, and keep the
		// deadline of an upload no writer waits for (see syncLocked).
		// With AsyncClose none does: a part that fails while the file is
		// written is only heard of after close(2) returned.
		pctx, cancel := s.fsys.uploadContext(ctx)
		defer cancel()
		if _, ok := pctx.Deadline(); !ok && s.fsys.asyncClose() {
			pctx, cancel = context.WithTimeout(pctx, asyncUploadTimeout)
			defer cancel()
		}
		if err := upload.PutPart(pctx, number, body, size); err != nil {
			p.failed = true // read after done
			s.mu.Lock()
			if s.err == nil {
				s.err = err
			}
			s.mu.Unlock()
		}
	}()
	if s.partLimit(s.part+1) > int64(s.fsys.opts.PartSize) || s.fsys.opts.partsOnDisk() {
		return nil // the next part is spooled, or takes a buffer should it fill in memory
	}
	var next *[]byte
	if len(s.inflight) < s.fsys.opts.Concurrency {
		next = s.fsys.partBuffers().tryGet()
	}
	if next == nil {
		next = s.reclaim()
		if next == nil {
			return s.failed()
		}
	}
	s.pooled, s.buf = next, (*next)[:0]
	return nil
}

// reclaim waits for the oldest in-flight part in memory and takes its
// buffer. Spooled parts come after the last of those, but for a small
// memory limit's (Options.partsOnDisk) that a part filling in memory
// found still in flight, its spool file not made or its room taken by
// another file meanwhile (startSpool): they are waited for and freed on
// the way.
func (s *stream) reclaim() *[]byte {
	for len(s.inflight) > 0 {
		p := s.inflight[0]
		s.inflight = s.inflight[1:]
		<-p.done
		if p.buf != nil && s.failed() == nil {
			return p.buf
		}
		s.free(p)
		if s.failed() != nil {
			return nil
		}
	}
	return nil
}

// retireOldest waits for the oldest in-flight part and frees what it held.
func (s *stream) retireOldest() error {
	p := s.inflight[0]
	s.inflight = s.inflight[1:]
	<-p.done
	s.free(p)
	return s.failed()
}

// free gives back what a finished part held.
func (s *stream) free(p *partUpload) {
	switch {
	case p.buf != nil && p.failed:
		buf, bufs := p.buf, s.fsys.partBuffers()
		time.AfterFunc(failedPartLinger, func() { bufs.put(buf) })
	case p.buf != nil:
		s.fsys.partBuffers().put(p.buf)
	}
	if p.file != nil {
		p.file.Close()
	}
}

// wait waits for every in-flight part and frees their buffers.
func (s *stream) wait() error {
	for _, p := range s.inflight {
		<-p.done
		s.free(p)
	}
	s.inflight = nil
	return s.failed()
}

// finish uploads what is left and makes the object visible.
func (s *stream) finish(ctx context.Context, meta map[string]string) (store.Object, error) {
	held := s.memoryHeld()
	s.fsys.uploadStarted(held)
	defer s.fsys.uploadEnded(held) // after release has given it back
	defer s.release()
	if s.upload == nil {
		// Small enough for one request.
		key, err := s.key()
		if err != nil {
			return store.Object{}, err
		}
		var body io.Reader = bytes.NewReader(s.buf)
		size := int64(len(s.buf))
		if s.spool != nil {
			body, size = io.NewSectionReader(s.spool.f, 0, s.spoolLen), s.spoolLen
		}
		o, err := s.fsys.store.Put(ctx, key, body, size, meta)
		if err != nil {
			return store.Object{}, err
		}
		o.Size = s.size
		return o, nil
	}
	if s.partLen() > 0 {
		if err := s.sendPart(ctx, meta); err != nil {
			s.abortAfter(ctx)
			return store.Object{}, err
		}
	}
	if err := s.wait(); err != nil {
		s.abortAfter(ctx)
		return store.Object{}, err
	}
	o, err := s.upload.Complete(ctx)
	if err != nil {
		s.abortAfter(ctx)
		return store.Object{}, err
	}
	if key, kerr := s.key(); kerr == nil && key != s.uploadKey {
		// Renamed (the file or a directory above it) while it streamed.
		if o, err = s.fsys.moveObject(ctx, s.uploadKey, key); err != nil {
			return store.Object{}, err
		}
	}
	o.Size = s.size
	return o, nil
}

// moveObject moves the object at src to dst: a copy, then a delete.
func (f *FS) moveObject(ctx context.Context, src, dst string) (store.Object, error) {
	o, err := f.store.Copy(ctx, src, store.AnyVersion, dst, nil)
	if err != nil {
		return store.Object{}, fmt.Errorf("move %q to %q: %w", src, dst, err)
	}
	if err := f.store.Delete(ctx, src); err != nil {
		return store.Object{}, fmt.Errorf("move %q to %q: %w", src, dst, err)
	}
	return o, nil
}

// abort cancels the upload; nothing of it remains in the bucket.
func (s *stream) abort() { s.abortUpload(false) }

// abortAfter aborts after a failure under ctx. When ctx has ended (the
// upload was cut as the mounter stops, or ran out of time), the abort
// goes to the background: the failure is to be reported first, within
// the stop deadline, not after a request to an endpoint that may not
// answer.
func (s *stream) abortAfter(ctx context.Context) { s.abortUpload(ctx.Err() != nil) }

func (s *stream) abortUpload(later bool) {
	s.wait()
	if s.upload != nil {
		key, _ := s.key()
		abortUpload(s.fsys, s.upload, key, later)
		s.upload = nil
	}
	s.release()
}

// abortUpload aborts u, an upload to key: now, and again in the
// background should that fail, or with later only in the background.
func abortUpload(f *FS, u store.Upload, key string, later bool) {
	if later {
		go retryAbort(f, u, key)
		return
	}
	// Abort must happen even if the request that failed was cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := u.Abort(ctx); err != nil {
		// Usually the store is down: retry in the background so the
		// parts do not linger once it is back.
		f.opts.Logger.Warn("abort multipart upload; retrying in the background", "key", key, "err", err)
		go retryAbort(f, u, key)
	}
}

func (s *stream) release() {
	s.wait()
	if s.pooled != nil {
		s.fsys.partBuffers().put(s.pooled)
		s.pooled = nil
	}
	s.buf = nil
	s.freeSmall()
	if s.spool != nil {
		s.spool.Close()
		s.spool, s.spoolLen = nil, 0
	}
}

// memoryHeld is what the stream takes of the memory limit.
func (s *stream) memoryHeld() int64 {
	n := s.held
	for _, p := range s.inflight {
		if p.buf != nil {
			n += int64(s.fsys.opts.PartSize)
		}
	}
	if s.pooled != nil {
		n += int64(s.fsys.opts.PartSize)
	}
	return n
}

// started reports whether any part has been sent.
func (s *stream) started() bool { return s.upload != nil }

// retryAbort keeps trying to abort an upload for about ten minutes.
func retryAbort(f *FS, u store.Upload, key string) {
	delay := time.Second
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); delay = min(2*delay, time.Minute) {
		time.Sleep(delay)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := u.Abort(ctx)
		cancel()
		if err == nil {
			f.opts.Logger.Info("aborted multipart upload after retrying", "key", key)
			return
		}
	}
	f.opts.Logger.Error("gave up aborting a multipart upload; the bucket's lifecycle rules must clean it", "key", key)
}
