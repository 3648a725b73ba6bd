package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/objfuse/objfuse/fusefs/store"
)

// ContentTypeKey in a metadata map passed to Put or NewUpload sets the
// object's Content-Type instead of a user metadata header.
const ContentTypeKey = "content-type"

// Store is a store.Store over one S3 bucket.
type Store struct {
	client *minio.Client
	core   minio.Core
	bucket string
	cfg    Config
	// raw sends the ranged GETs whose bodies can splice; nil when the
	// endpoint is HTTPS or proxied.
	raw *rawGetTransport
	// maxParts is S3's limit on parts; tests lower it.
	maxParts int
	health   *health
	// isMinIO: a response said it came from MinIO, which batches small
	// puts (batch.go).
	isMinIO atomic.Bool
	batch   *batcher
}

// New returns a Store for bucket. It makes no request; call Check to
// verify that the endpoint, credentials and bucket are usable.
func New(cfg Config, bucket string) (*Store, error) {
	h := &health{}
	st := &Store{bucket: bucket, maxParts: store.MaxParts, health: h}
	c, raw, err := newClient(cfg, h, &st.isMinIO)
	if err != nil {
		return nil, err
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = 16 << 20
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	st.client, st.core, st.cfg, st.raw = c, minio.Core{Client: c}, cfg, raw
	if !cfg.NoBatching {
		st.batch = &batcher{s: st}
	}
	return st, nil
}

// Health is the latest failure of the store's requests that a person must
// fix, until a request works again (store.HealthReporter). While there is
// one, it asks S3 every probeEvery, in the background, whether it is
// over: a mount no one uses sends no request that would clear it.
func (s *Store) Health() store.Health {
	h := s.health.get()
	if h.Problem != nil && s.health.dueForProbe() {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), probeEvery)
			defer cancel()
			s.probe(ctx)
		}()
	}
	return h
}

// probe lists one key of the bucket, as Check does when a mount starts:
// a success clears the problem, a failure keeps it, unless a request
// sent after the probe worked.
func (s *Store) probe(ctx context.Context) {
	sent := time.Now()
	if err := s.listOne(ctx); err != nil {
		s.failSent(err, sent)
	}
}

// fail maps err for the caller and keeps its explanation for Health. The
// failed request was sent before now, how long before fail cannot tell
// (retries): a success of a request sent in between does not clear it.
func (s *Store) fail(err error) error {
	return s.failSent(err, time.Now())
}

// failSent is fail of a request sent at sent.
func (s *Store) failSent(err error, sent time.Time) error {
	mapped := mapErr(err)
	if reportable(mapped) {
		s.health.failed(s.explain(err), sent)
	}
	return mapped
}

// Splices reports whether Get bodies can splice into a pipe
// (store.Splicer): true for plain-HTTP endpoints reached directly.
func (s *Store) Splices() bool { return s.raw != nil }

// Client is the underlying minio-go client.
func (s *Store) Client() *minio.Client { return s.client }

// Bucket is the bucket this store serves.
func (s *Store) Bucket() string { return s.bucket }

// Check verifies in one request that the endpoint answers, the credentials
// are accepted and the bucket exists, and explains what is wrong if not.
func (s *Store) Check(ctx context.Context) error {
	// minio-go refuses some names without sending a request, with a bare
	// error that would read as an unreachable endpoint.
	if err := s3utils.CheckValidBucketName(s.bucket); err != nil {
		return fmt.Errorf("bucket name %q is not valid: %v: %w", s.bucket, err, store.ErrInvalid)
	}
	return s.explain(s.listOne(ctx))
}

// listOne asks for one key of the bucket: the cheapest request that needs
// the endpoint, the credentials and the bucket all to work.
func (s *Store) listOne(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for info := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{MaxKeys: 1}) {
		cancel()
		// One answer is enough; the next page would only see the cancel.
		return info.Err
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// explain turns a failed request into a message a user can act on.
func (s *Store) explain(err error) error {
	return explain(err, s.client.EndpointURL().String(), s.bucket)
}

// mapErr wraps err with the store error it stands for.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	resp := minio.ToErrorResponse(err)
	var kind error
	switch resp.Code {
	case "NoSuchKey", "NoSuchUpload":
		kind = store.ErrNotExist
	case "NoSuchBucket":
		kind = store.ErrNoBucket
	case "PreconditionFailed":
		kind = store.ErrChanged
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken":
		kind = store.ErrAccess
	case "InvalidRange", "InvalidArgument", "EntityTooSmall", "EntityTooLarge", "InvalidPart", "InvalidPartOrder", "KeyTooLongError", "XMinioInvalidObjectName", "XMinioObjectExistsAsDirectory",
		// versitygw keeps objects as files: keys that are not paths, or
		// both a file and a directory, are refused like MinIO's.
		"ExistingObjectIsDirectory", "ObjectParentIsFile":
		kind = store.ErrInvalid
	case "":
		kind = store.ErrUnavailable
	default:
		switch {
		case resp.StatusCode == http.StatusNotFound:
			kind = store.ErrNotExist
		case resp.StatusCode == http.StatusPreconditionFailed:
			kind = store.ErrChanged
		case resp.StatusCode == http.StatusForbidden:
			kind = store.ErrAccess
		case resp.StatusCode == http.StatusBadRequest:
			kind = store.ErrInvalid
		default:
			kind = store.ErrUnavailable
		}
	}
	return fmt.Errorf("%w: %v", kind, err)
}

func (s *Store) Head(ctx context.Context, key string) (store.Object, error) {
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return store.Object{}, fmt.Errorf("head %q: %w", key, s.fail(err))
	}
	o, err := object(info, info.UserMetadata)
	if err != nil {
		return store.Object{}, fmt.Errorf("head %q: %w", key, err)
	}
	return o, nil
}

// Peek is a HEAD that brings the object's first len(dest) bytes too, in
// one ranged GET, or a plain one when whole is set (store.Peeker). Where the
// GET cannot answer as the HEAD would (an empty object has no range to
// give; an archived object or one whose key the mount may not decrypt
// with refuses its bytes, not its attributes; an answer without a size),
// the object is asked for with a HEAD.
func (s *Store) Peek(ctx context.Context, key string, dest []byte, whole bool) (store.Object, int, error) {
	peek := s.peek
	if whole {
		peek = s.peekWhole
	}
	o, n, err := peek(ctx, key, dest)
	if err == nil || errors.Is(err, store.ErrNotExist) || ctx.Err() != nil {
		return o, n, err
	}
	o, err = s.Head(ctx, key)
	return o, 0, err
}

func (s *Store) peek(ctx context.Context, key string, dest []byte) (store.Object, int, error) {
	var opts minio.GetObjectOptions
	if err := opts.SetRange(0, int64(len(dest))-1); err != nil {
		return store.Object{}, 0, fmt.Errorf("peek %q: %w", key, err)
	}
	body, info, header, err := s.peekGet(ctx, key, opts)
	if err != nil {
		return store.Object{}, 0, err
	}
	defer body.Close()
	cr := header.Get("Content-Range")
	if cr == "" {
		return store.Object{}, 0, fmt.Errorf("peek %q: the server answered the range with the whole object", key)
	}
	// "bytes 0-N/SIZE": the object's size, not the range's.
	if err := rangeStartsAt(0, cr); err != nil {
		return store.Object{}, 0, fmt.Errorf("peek %q: %w", key, err)
	}
	total, err := strconv.ParseInt(cr[strings.LastIndexByte(cr, '/')+1:], 10, 64)
	if err != nil {
		return store.Object{}, 0, fmt.Errorf("peek %q: the server's Content-Range %q gives no size", key, cr)
	}
	info.Key, info.Size = key, total
	o, err := object(info, info.UserMetadata)
	if err != nil {
		return store.Object{}, 0, fmt.Errorf("peek %q: %w", key, err)
	}
	return peekBody(key, o, body, dest)
}

// peekWhole is peek with a plain GET: the whole object's attributes, and
// its bytes up to len(dest). A longer object's body is closed after them,
// which costs its connection.
func (s *Store) peekWhole(ctx context.Context, key string, dest []byte) (store.Object, int, error) {
	body, info, _, err := s.peekGet(ctx, key, minio.GetObjectOptions{})
	if err != nil {
		return store.Object{}, 0, err
	}
	defer body.Close()
	if info.Size < 0 {
		return store.Object{}, 0, fmt.Errorf("peek %q: the server's answer gives no size", key)
	}
	info.Key = key
	o, err := object(info, info.UserMetadata)
	if err != nil {
		return store.Object{}, 0, fmt.Errorf("peek %q: %w", key, err)
	}
	return peekBody(key, o, body, dest)
}

// peekGet sends a peek's GET.
func (s *Store) peekGet(ctx context.Context, key string, opts minio.GetObjectOptions) (io.ReadCloser, minio.ObjectInfo, http.Header, error) {
	body, info, header, err := s.core.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		if code := minio.ToErrorResponse(err).Code; code == "NoSuchKey" {
			return nil, info, nil, fmt.Errorf("peek %q: %w", key, store.ErrNotExist)
		}
		return nil, info, nil, fmt.Errorf("peek %q: %w", key, err)
	}
	return body, info, header, nil
}

// peekBody reads the first bytes of o, up to len(dest), from body into
// dest, and its end when they are all of it: net/http keeps a connection
// for the next request only if the body it closes was read to EOF, and an
// exact read stops short of that.
func peekBody(key string, o store.Object, body io.Reader, dest []byte) (store.Object, int, error) {
	data := dest[:min(int64(len(dest)), o.Size)]
	if _, err := io.ReadFull(body, data); err != nil {
		return store.Object{}, 0, fmt.Errorf("peek %q: %w", key, err)
	}
	if int64(len(data)) == o.Size {
		beyond := dest[len(data):] // room past the object, when dest has it
		if len(beyond) == 0 {
			beyond = make([]byte, 1)
		}
		if n, err := body.Read(beyond[:1]); n > 0 || err != io.EOF && err != nil {
			return store.Object{}, 0, fmt.Errorf("peek %q: the body is longer than the object's size (%d bytes), or failed: %v", key, o.Size, err)
		}
	}
	return o, len(data), nil
}

func (s *Store) Get(ctx context.Context, key, etag string, off, length int64) (io.ReadCloser, error) {
	var opts minio.GetObjectOptions
	if etag != store.AnyVersion {
		opts.SetMatchETag(etag)
	}
	switch {
	case length == 0:
		return io.NopCloser(strings.NewReader("")), nil
	case length > 0:
		if err := opts.SetRange(off, off+length-1); err != nil {
			return nil, fmt.Errorf("get %q: %w", key, err)
		}
	case off > 0:
		if err := opts.SetRange(off, 0); err != nil {
			return nil, fmt.Errorf("get %q: %w", key, err)
		}
	}
	body, _, header, err := s.core.GetObject(ctx, s.bucket, key, opts)
	if etag != store.AnyVersion && minio.ToErrorResponse(err).Code == "InvalidRange" {
		// Callers ask for ranges within the version they name: one past
		// the object's end means it is another, shorter version (MinIO
		// checks the range before If-Match).
		return nil, fmt.Errorf("get %q of version %s: the object is shorter than that version: %w", key, etag, store.ErrChanged)
	}
	if err != nil {
		return nil, fmt.Errorf("get %q: %w", key, s.fail(err))
	}
	if got := strings.Trim(header.Get("ETag"), `"`); etag != store.AnyVersion && got != "" && got != etag {
		// A server (or proxy) that ignores If-Match answers with
		// another version's bytes: they must not be mixed in.
		body.Close()
		return nil, fmt.Errorf("get %q of version %s: the server ignored If-Match and sent version %s: %w", key, etag, got, store.ErrChanged)
	}
	if length < 0 && off == 0 {
		return body, nil
	}
	cr := header.Get("Content-Range")
	if err := rangeStartsAt(off, cr); err != nil {
		body.Close()
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	if cr == "" && length > 0 {
		// The whole object for a range from 0: only the range is the answer.
		return struct {
			io.Reader
			io.Closer
		}{io.LimitReader(body, length), body}, nil
	}
	return body, nil
}

func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		if errors.Is(mapErr(err), store.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("delete %q: %w", key, s.fail(err))
	}
	return nil
}

// maxCopySize is the largest object a single CopyObject request may copy.
const maxCopySize = 5 << 30

func (s *Store) Copy(ctx context.Context, src, srcETag, dst string, meta map[string]string) (store.Object, error) {
	srcOpts := minio.CopySrcOptions{Bucket: s.bucket, Object: src, MatchETag: srcETag}
	dstOpts := minio.CopyDestOptions{Bucket: s.bucket, Object: dst}
	if meta != nil {
		dstOpts.ReplaceMetadata = true
		dstOpts.UserMetadata = map[string]string{}
		for k, v := range meta {
			if k != ContentTypeKey {
				dstOpts.UserMetadata[k] = v
			}
		}
	}
	info, err := s.client.CopyObject(ctx, dstOpts, srcOpts)
	if err != nil && minio.ToErrorResponse(err).Code == "InvalidRequest" {
		// Objects over 5 GiB need a multipart copy.
		info, err = s.client.ComposeObject(ctx, dstOpts, srcOpts)
	}
	if err != nil {
		return store.Object{}, fmt.Errorf("copy %q to %q: %w", src, dst, s.fail(err))
	}
	return store.Object{Key: dst, Size: info.Size, ETag: info.ETag, LastModified: info.LastModified, Metadata: lower(meta)}, nil
}

func (s *Store) List(ctx context.Context, prefix, startAfter string, recursive bool) iter.Seq2[store.Entry, error] {
	return s.list(ctx, prefix, startAfter, recursive, 1000)
}

// First asks for one key: MinIO answers a one-key page faster than a
// full one, and a stat of an unlisted name costs about one HEAD.
func (s *Store) First(ctx context.Context, prefix string) (store.Entry, bool, error) {
	for e, err := range s.list(ctx, prefix, "", false, 1) {
		return e, err == nil, err
	}
	return store.Entry{}, false, nil
}

func (s *Store) list(ctx context.Context, prefix, startAfter string, recursive bool, maxKeys int) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{
			Prefix:       prefix,
			StartAfter:   startAfter,
			Recursive:    recursive,
			WithMetadata: true, // a MinIO extension; other servers ignore it
			MaxKeys:      maxKeys,
		})
		// The channel's producer stops on cancel; drain it so it can exit.
		defer func() {
			cancel()
			for range ch {
			}
		}()
		for info := range ch {
			if info.Err != nil {
				yield(store.Entry{}, fmt.Errorf("list %q: %w", prefix, s.fail(info.Err)))
				return
			}
			var e store.Entry
			if strings.HasSuffix(info.Key, "/") && info.Size == 0 && info.ETag == "" && info.LastModified.IsZero() {
				e.Prefix = info.Key
			} else {
				// MinIO answers WithMetadata with each object's metadata,
				// content-type at least: then an object without user
				// metadata is known to have none, and needs no HEAD.
				// Other servers send nothing: meta stays nil (unknown).
				var meta map[string]string
				if info.UserMetadata != nil {
					meta = map[string]string{}
					for k, v := range info.UserMetadataStripped {
						meta[k] = v
					}
				}
				o, err := object(info, meta)
				if err != nil {
					// One broken entry must not hide its directory.
					s.cfg.logger().Warn("skipping a listed object", "prefix", prefix, "err", err)
					continue
				}
				e.Object = o
			}
			if !yield(e, nil) {
				return
			}
		}
	}
}

// maxAnsweredSize bounds the object sizes a server's answers are taken
// at: above the largest object any S3 server stores (AWS's 48.8 TiB), or
// below zero, a size is a broken answer, and taken as a file's size it
// would overflow offsets or reserve absurd staging space.
const maxAnsweredSize = 64 << 40

// object is the store's view of an object the server described; an
// impossible size is an error, not an object.
func object(info minio.ObjectInfo, meta map[string]string) (store.Object, error) {
	if info.Size < 0 || info.Size > maxAnsweredSize {
		return store.Object{}, fmt.Errorf("the server gave %q a size of %d bytes (or none: -1), which no object has", info.Key, info.Size)
	}
	o := store.Object{Key: info.Key, Size: info.Size, ETag: strings.Trim(info.ETag, `"`), LastModified: info.LastModified}
	if meta != nil {
		o.Metadata = lower(meta)
	}
	return o, nil
}

func lower(meta map[string]string) map[string]string {
	if meta == nil {
		return nil
	}
	out := make(map[string]string, len(meta))
	for k, v := range meta {
		k = strings.ToLower(k)
		if k == ContentTypeKey {
			continue
		}
		out[strings.TrimPrefix(k, "x-amz-meta-")] = v
	}
	return out
}
