// Package memstore is an in-memory store.Store for tests. It behaves like
// S3 where the filesystem can tell the difference: listings are sorted and
// delimited, multipart parts only become visible on Complete, and copies
// keep or replace metadata.
package memstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
)

type object struct {
	data []byte
	info store.Object
}

// Store is a concurrency-safe in-memory bucket.
type Store struct {
	mu      sync.Mutex
	objects map[string]*object
	// FailWith, when set, is consulted before every operation; a non-nil
	// result fails the operation. Tests use it to inject faults.
	FailWith func(op, key string) error
	// patterned: objects are their Pattern, and no bytes are kept.
	patterned bool
	// sorted are the keys in order, nil once one is added or removed
	// (List makes them again). Never changed in place: a listing under
	// way goes on with the keys it began with.
	sorted []string
}

// New returns an empty store.
func New() *Store { return &Store{objects: map[string]*object{}} }

func (s *Store) fail(op, key string) error {
	if f := s.FailWith; f != nil {
		return f(op, key)
	}
	return nil
}

func (s *Store) Head(ctx context.Context, key string) (store.Object, error) {
	if err := s.fail("head", key); err != nil {
		return store.Object{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return store.Object{}, fmt.Errorf("head %q: %w", key, store.ErrNotExist)
	}
	return cloneInfo(o.info), nil
}

// Peek is Head with the object's first bytes read into dest
// (store.Peeker); the memory store answers a whole peek as any other.
func (s *Store) Peek(ctx context.Context, key string, dest []byte, whole bool) (store.Object, int, error) {
	if err := s.fail("peek", key); err != nil {
		return store.Object{}, 0, err
	}
	s.mu.Lock()
	o, ok := s.objects[key]
	s.mu.Unlock()
	if !ok {
		return store.Object{}, 0, fmt.Errorf("peek %q: %w", key, store.ErrNotExist)
	}
	data := dest[:min(int64(len(dest)), o.info.Size)]
	if s.patterned {
		Pattern(key, 0, data)
	} else {
		copy(data, o.data) // immutable once stored
	}
	return cloneInfo(o.info), len(data), nil
}

func (s *Store) Get(ctx context.Context, key, etag string, off, length int64) (io.ReadCloser, error) {
	if err := s.fail("get", key); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return nil, fmt.Errorf("get %q: %w", key, store.ErrNotExist)
	}
	if etag != store.AnyVersion && etag != o.info.ETag {
		return nil, fmt.Errorf("get %q of version %s, now %s: %w", key, etag, o.info.ETag, store.ErrChanged)
	}
	size := o.info.Size
	if off > size || off < 0 {
		return nil, fmt.Errorf("get %q at %d of %d: %w", key, off, size, store.ErrInvalid)
	}
	end := size
	if length >= 0 && off+length < size {
		end = off + length
	}
	if s.patterned {
		return io.NopCloser(io.LimitReader(&patternReader{key: key, off: off}, end-off)), nil
	}
	// Objects are immutable once stored, so sharing the slice is safe.
	return io.NopCloser(bytes.NewReader(o.data[off:end])), nil
}

func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	data, n, err := s.body("put", key, r, size)
	if err != nil {
		return store.Object{}, err
	}
	return s.store(key, data, n, meta), nil
}

// body reads the size bytes of a put's body (any number when size < 0),
// after the fault op may inject.
func (s *Store) body(op, key string, r io.Reader, size int64) ([]byte, int64, error) {
	if err := s.fail(op, key); err != nil {
		return nil, 0, err
	}
	var data []byte
	var n int64
	var err error
	if s.patterned {
		n, err = checkPattern(key, 0, r)
	} else {
		data, err = io.ReadAll(r)
		n = int64(len(data))
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%s %q: %w", op, key, err)
	}
	if size >= 0 && n != size {
		return nil, 0, fmt.Errorf("%s %q: read %d bytes, want %d: %w", op, key, n, size, store.ErrInvalid)
	}
	return data, n, nil
}

func (s *Store) PutIfMatch(ctx context.Context, key, etag string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	data, n, err := s.body("put", key, r, size)
	if err != nil {
		return store.Object{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.objects[key]; !ok || o.info.ETag != etag {
		return store.Object{}, fmt.Errorf("put %q if it is version %s: %w", key, etag, store.ErrChanged)
	}
	return s.storeLocked(key, data, n, meta), nil
}

func (s *Store) store(key string, data []byte, size int64, meta map[string]string) store.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.storeLocked(key, data, size, meta)
}

// storeLocked stores data, of size bytes, as key; a patterned store's
// data is nil, its content the key's Pattern.
func (s *Store) storeLocked(key string, data []byte, size int64, meta map[string]string) store.Object {
	sum := md5.Sum(data)
	if s.patterned {
		sum = md5.Sum(fmt.Appendf(nil, "%s\x00%d", key, size))
	}
	o := &object{data: data, info: store.Object{
		Key: key, Size: size, ETag: hex.EncodeToString(sum[:]),
		LastModified: time.Now(), Metadata: maps.Clone(meta),
	}}
	if o.info.Metadata == nil {
		o.info.Metadata = map[string]string{}
	}
	if _, ok := s.objects[key]; !ok {
		s.sorted = nil
	}
	s.objects[key] = o
	return cloneInfo(o.info)
}

func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.fail("delete", key); err != nil {
		return err
	}
	s.mu.Lock()
	if _, ok := s.objects[key]; ok {
		delete(s.objects, key)
		s.sorted = nil
	}
	s.mu.Unlock()
	return nil
}

func (s *Store) Copy(ctx context.Context, src, srcETag, dst string, meta map[string]string) (store.Object, error) {
	if err := s.fail("copy", src); err != nil {
		return store.Object{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[src]
	if !ok {
		return store.Object{}, fmt.Errorf("copy %q: %w", src, store.ErrNotExist)
	}
	if srcETag != store.AnyVersion && srcETag != o.info.ETag {
		return store.Object{}, fmt.Errorf("copy %q of version %s, now %s: %w", src, srcETag, o.info.ETag, store.ErrChanged)
	}
	if meta == nil {
		meta = o.info.Metadata
	}
	if s.patterned && dst != src {
		return store.Object{}, fmt.Errorf("copy %q to %q: a patterned object's bytes are its key's: %w", src, dst, store.ErrInvalid)
	}
	return s.storeLocked(dst, o.data, o.info.Size, meta), nil
}

// List yields the entries as they are when each is reached, holding no
// more than one at a time: a listing of a million keys costs the test's
// heap no more than the keys do.
func (s *Store) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		if err := s.fail("list", prefix); err != nil {
			yield(store.Entry{}, err)
			return
		}
		keys := s.sortedKeys()
		i, _ := slices.BinarySearch(keys, max(prefix, startAfter))
		rolledUp := "" // the prefix of the keys passed last, already handled
		for ; i < len(keys) && strings.HasPrefix(keys[i], prefix); i++ {
			key := keys[i]
			var e store.Entry
			if j := strings.IndexByte(key[len(prefix):], '/'); j >= 0 && !recursive {
				// Keys with one prefix are next to one another in order.
				if p := key[:len(prefix)+j+1]; p != rolledUp {
					rolledUp, e = p, store.Entry{Prefix: p}
				} else {
					continue
				}
			} else {
				s.mu.Lock()
				o, ok := s.objects[key]
				if ok {
					e = store.Entry{Object: cloneInfo(o.info)}
				}
				s.mu.Unlock()
				if !ok {
					continue // deleted since the listing began
				}
			}
			if e.Name() <= startAfter {
				continue
			}
			if ctx.Err() != nil {
				yield(store.Entry{}, ctx.Err())
				return
			}
			if !yield(e, nil) {
				return
			}
		}
	}
}

// sortedKeys are the store's keys in order.
func (s *Store) sortedKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sorted == nil {
		s.sorted = slices.Sorted(maps.Keys(s.objects))
	}
	return s.sorted
}

func (s *Store) NewUpload(ctx context.Context, key, etag string, meta map[string]string) (store.Upload, error) {
	if err := s.fail("newupload", key); err != nil {
		return nil, err
	}
	return &upload{s: s, key: key, ifMatch: etag, meta: maps.Clone(meta), parts: map[int][]byte{}}, nil
}

// Keys returns every key in the store, sorted. For tests.
func (s *Store) Keys() []string { return slices.Clone(s.sortedKeys()) }

type upload struct {
	s       *Store
	key     string
	ifMatch string // the version Complete requires, unless AnyVersion
	meta    map[string]string
	mu      sync.Mutex
	parts   map[int][]byte
	sums    map[int]partSum // a patterned store's parts
	done    bool
}

func (u *upload) PutPart(ctx context.Context, number int, part io.ReaderAt, size int64) error {
	if err := u.s.fail("putpart", u.key); err != nil {
		return err
	}
	var data []byte
	if u.s.patterned {
		// Where the part goes is known once every part is in: until then
		// its size and digest stand for it.
		sum, err := digest(io.NewSectionReader(part, 0, size))
		if err != nil {
			return fmt.Errorf("put part %d of %q: %w", number, u.key, err)
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.done {
			return fmt.Errorf("put part %d of %q: upload finished: %w", number, u.key, store.ErrInvalid)
		}
		if u.sums == nil {
			u.sums = map[int]partSum{}
		}
		u.sums[number] = partSum{size: size, sum: sum}
		u.parts[number] = nil
		return nil
	}
	data = make([]byte, size)
	if n, err := part.ReadAt(data, 0); int64(n) < size {
		return fmt.Errorf("put part %d of %q: read %d of %d bytes: %w", number, u.key, n, size, err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return fmt.Errorf("put part %d of %q: upload finished: %w", number, u.key, store.ErrInvalid)
	}
	u.parts[number] = data
	return nil
}

func (u *upload) Complete(ctx context.Context) (store.Object, error) {
	if err := u.s.fail("complete", u.key); err != nil {
		return store.Object{}, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	nums := slices.Sorted(maps.Keys(u.parts))
	var data []byte
	var size int64
	for i, n := range nums {
		partSize := int64(len(u.parts[n]))
		if u.s.patterned {
			partSize = u.sums[n].size
		}
		if n != i+1 {
			return store.Object{}, fmt.Errorf("complete %q: part %d missing: %w", u.key, i+1, store.ErrInvalid)
		}
		if i < len(nums)-1 && partSize < store.MinPartSize {
			return store.Object{}, fmt.Errorf("complete %q: part %d is %d bytes: %w", u.key, n, partSize, store.ErrInvalid)
		}
		if u.s.patterned {
			if want, _ := digest(io.LimitReader(&patternReader{key: u.key, off: size}, partSize)); want != u.sums[n].sum {
				return store.Object{}, fmt.Errorf("complete %q: part %d at %d is not the key's pattern: %w", u.key, n, size, store.ErrInvalid)
			}
		}
		data = append(data, u.parts[n]...)
		size += partSize
	}
	u.s.mu.Lock()
	defer u.s.mu.Unlock()
	if o, ok := u.s.objects[u.key]; u.ifMatch != store.AnyVersion && (!ok || o.info.ETag != u.ifMatch) {
		return store.Object{}, fmt.Errorf("complete %q if it is version %s: %w", u.key, u.ifMatch, store.ErrChanged)
	}
	u.done = true
	return u.s.storeLocked(u.key, data, size, u.meta), nil
}

func (u *upload) Abort(ctx context.Context) error {
	u.mu.Lock()
	u.done = true
	u.parts = nil
	u.mu.Unlock()
	return nil
}

func cloneInfo(o store.Object) store.Object {
	o.Metadata = maps.Clone(o.Metadata)
	return o
}
