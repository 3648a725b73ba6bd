// Package store defines the small slice of an object store that the objfuse
// filesystem needs. Keeping it small keeps the filesystem testable on an
// in-memory store and lets the S3 implementation stay a thin adapter.
package store

import (
	"context"
	"io"
	"iter"
	"time"
)

// AnyVersion is the etag of a Get that takes whatever the object holds.
const AnyVersion = ""

// Object describes one stored object. Metadata holds user metadata with
// lower-case keys and without the "x-amz-meta-" prefix ("mode", "uid", ...).
// Metadata is nil when the source (a plain listing) did not include it.
type Object struct {
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
	Metadata     map[string]string
}

// Entry is one item of a listing: either an object or, for a delimited
// listing, a common prefix (Prefix ends with "/", Object is zero).
type Entry struct {
	Object
	Prefix string
}

// IsPrefix reports whether the entry is a common prefix (a "directory").
func (e Entry) IsPrefix() bool { return e.Prefix != "" }

// Store is a flat key/value object store scoped to one bucket.
type Store interface {
	// Head returns an object's attributes and metadata. ErrNotExist if absent.
	Head(ctx context.Context, key string) (Object, error)
	// Get returns a reader for length bytes starting at off; length < 0
	// reads to the end. Unless etag is AnyVersion the bytes must be that
	// version's: when the object's ETag is another, Get fails with
	// ErrChanged (S3's If-Match). Errors from the first request are
	// returned here, not on the first Read.
	Get(ctx context.Context, key, etag string, off, length int64) (io.ReadCloser, error)
	// Put stores an object of known size in one request (or the
	// implementation's own multipart upload for a large ReaderAt).
	Put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (Object, error)
	// PutIfMatch is Put conditional on the object still being version
	// etag (S3's If-Match on PutObject and CompleteMultipartUpload): it
	// fails with ErrChanged, storing nothing, when another writer
	// replaced or deleted it meanwhile. A server that ignores If-Match
	// stores unconditionally: the last writer wins, as on S3 before
	// conditional writes.
	PutIfMatch(ctx context.Context, key, etag string, r io.Reader, size int64, meta map[string]string) (Object, error)
	// NewUpload starts a multipart upload; parts may be sent in parallel.
	// Unless etag is AnyVersion, Complete stores the upload only if the
	// object is still version etag, as PutIfMatch.
	NewUpload(ctx context.Context, key, etag string, meta map[string]string) (Upload, error)
	// List yields the entries under prefix in key order. With a delimiter of
	// "/" (recursive false) keys below the next "/" roll up into prefixes.
	// startAfter skips entries up to and including that key.
	List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[Entry, error]
	// Delete removes an object; deleting an absent object is not an error.
	Delete(ctx context.Context, key string) error
	// Copy copies src to dst server-side. A nil meta keeps src's metadata;
	// a non-nil meta replaces it.
	// Unless srcETag is AnyVersion, src must be that version: ErrChanged
	// when it is not (x-amz-copy-source-if-match).
	Copy(ctx context.Context, src, srcETag, dst string, meta map[string]string) (Object, error)
}

// Prober is a Store that can ask "is there anything under prefix?" more
// cheaply than a listing page: a stat of a name not listed yet asks it.
type Prober interface {
	// First returns the first entry under prefix (with a "/" delimiter),
	// and false when there is none.
	First(ctx context.Context, prefix string) (Entry, bool, error)
}

// Peeker is a Store that answers a HEAD with the object's first bytes in
// the same request (a ranged GET): a lookup that a read will follow costs
// one round trip instead of two.
type Peeker interface {
	// Peek returns what Head does of key, and reads its first bytes into
	// dest, up to len(dest) (fewer when the object is shorter), all of
	// one version; n is how many. ErrNotExist if absent. The caller's
	// dest lets a mount that peeks file after file reuse its buffers
	// rather than have the collector run for each file's. With whole set
	// the caller expects the object to fit in dest, and the store may ask
	// for all of it rather than a range: what any client reading a small
	// file sends, which costs an S3 server less (MinIO serves about a
	// fifth more whole GETs of 100 KiB than ranged ones), and costs a
	// dropped connection when the object is longer after all.
	Peek(ctx context.Context, key string, dest []byte, whole bool) (o Object, n int, err error)
}

// Splicer is a Store whose Get bodies are PipeSources: a plain-HTTP S3
// endpoint, where a body's bytes sit in a socket the kernel can splice
// from. Over TLS they must be decrypted in user space, so they cannot.
type Splicer interface {
	Splices() bool
}

// PipeSource is a Get body that can move its bytes into a pipe without
// copying them through user space. SpliceTo moves up to max bytes into
// the pipe whose write end is pipeFd, waiting until at least one byte is
// available; it returns io.EOF once the whole body was moved.
type PipeSource interface {
	SpliceTo(pipeFd int, max int) (int, error)
}

// Upload is an in-progress multipart upload. Part numbers start at 1 and
// every part but the last must be at least MinPartSize bytes.
type Upload interface {
	// PutPart sends the first size bytes of part as part number: a
	// buffer (bytes.Reader) or a file on disk, read at least twice (for
	// its checksum, then on the wire). A number sent again replaces the
	// part sent before under it.
	PutPart(ctx context.Context, number int, part io.ReaderAt, size int64) error
	Complete(ctx context.Context) (Object, error)
	Abort(ctx context.Context) error
}

// Name is the key or prefix the entry stands for.
func (e Entry) Name() string {
	if e.Prefix != "" {
		return e.Prefix
	}
	return e.Key
}

// Health is a store's account of why its requests fail now, when the
// reason is one a person must fix rather than the caller.
type Health struct {
	// Problem wraps ErrAccess (credentials or policy refused), ErrNoBucket
	// or ErrUnavailable (the endpoint does not answer) with an
	// explanation; nil while requests work.
	Problem error
	// Since is when the requests began to fail so.
	Since time.Time
}

// HealthReporter is a Store that keeps its Health.
type HealthReporter interface {
	Health() Health
}
