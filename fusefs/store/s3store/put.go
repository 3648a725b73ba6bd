package s3store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store"
)

// Every byte objfuse uploads travels with a CRC32C of it that the server
// checks, in this header, so a body corrupted on the way fails the upload
// instead of being stored. Nothing else would catch it on plain HTTP: the
// payload is unsigned (a SHA-256 of it costs more CPU than the upload, on
// both ends), and minio-go adds a checksum of its own only with trailing
// headers, which not every S3 server takes.
const (
	checksumHeader          = "x-amz-checksum-crc32c"
	checksumAlgorithmHeader = "x-amz-checksum-algorithm"
)

// abortTimeout bounds the abort of a failed multipart upload.
const abortTimeout = time.Minute

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32cBase64(sum uint32) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, sum))
}

func (s *Store) putOptions(meta map[string]string) minio.PutObjectOptions {
	opts := minio.PutObjectOptions{
		UserMetadata:         map[string]string{},
		DisableContentSha256: true,
	}
	for k, v := range meta {
		if k == ContentTypeKey {
			opts.ContentType = v
			continue
		}
		opts.UserMetadata[k] = v
	}
	return opts
}

// Put stores size bytes of r as key: in one request when they fit in a
// part, else as a multipart upload, each part with its own checksum. r
// must be at its start (minio-go rewinds a body to 0 to retry it).
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	if size > int64(s.cfg.PartSize) {
		return s.putParts(ctx, key, store.AnyVersion, r, size, meta)
	}
	if size <= BatchMaxObjectSize && s.batch != nil && batchable(key) && s.batch.enabled() {
		return s.batch.put(ctx, key, r, size, meta)
	}
	return s.putOne(ctx, key, r, size, meta)
}

// PutIfMatch is Put on the condition that the object is version etag.
// Never batched: a batch's objects are stored whatever is there.
func (s *Store) PutIfMatch(ctx context.Context, key, etag string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	if size > int64(s.cfg.PartSize) {
		return s.putParts(ctx, key, etag, r, size, meta)
	}
	return s.putOneIf(ctx, key, etag, r, size, meta)
}

// putOne stores an object of at most a part in one request.
func (s *Store) putOne(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	return s.putOneIf(ctx, key, store.AnyVersion, r, size, meta)
}

// putOneIf is putOne on the condition that the object is version etag
// (AnyVersion: none).
func (s *Store) putOneIf(ctx context.Context, key, etag string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	body, sum, err := checksummed(r, size)
	if err != nil {
		return store.Object{}, fmt.Errorf("put %q: %w", key, err)
	}
	opts := s.putOptions(meta)
	if etag != store.AnyVersion {
		opts.SetMatchETag(etag)
	}
	// minio-go sends x-amz-* user metadata keys as headers of their own.
	opts.UserMetadata[checksumHeader] = crc32cBase64(sum)
	var info minio.UploadInfo
	err = s.untilDeadline(ctx, func(ctx context.Context) error {
		if _, err := body.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("rewind the body: %w", err)
		}
		info, err = s.core.PutObject(ctx, s.bucket, key, body, size, "", "", opts)
		if etag != store.AnyVersion && minio.ToErrorResponse(err).Code == "PreconditionFailed" {
			// A retry (minio-go's or ours) after a reply lost on the
			// way finds the version its first try made: not a conflict.
			done, ok, serr := s.storedAlready(ctx, key, size, sum)
			switch {
			case ok:
				info, err = done, nil
			case serr != nil && errors.Is(mapErr(serr), store.ErrUnavailable):
				return s.fail(serr) // try again: it may be this PUT's
			}
		}
		return s.fail(err)
	})
	if err != nil {
		return store.Object{}, fmt.Errorf("put %q: %w", key, err)
	}
	return store.Object{Key: key, Size: info.Size, ETag: info.ETag, LastModified: info.LastModified, Metadata: lower(meta)}, nil
}

// storedAlready says whether the object at key is the one a PUT of size
// bytes with CRC32C sum stored: same size, same checksum (which the
// server keeps as sent). Another writer's identical bytes count as this
// PUT's: nothing of theirs is lost. An error says the object could not
// be looked at.
func (s *Store) storedAlready(ctx context.Context, key string, size int64, sum uint32) (minio.UploadInfo, bool, error) {
	o, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{Checksum: true})
	if err != nil {
		if errors.Is(mapErr(err), store.ErrNotExist) {
			return minio.UploadInfo{}, false, nil
		}
		return minio.UploadInfo{}, false, err
	}
	if o.Size != size || o.ChecksumCRC32C != crc32cBase64(sum) {
		return minio.UploadInfo{}, false, nil
	}
	return minio.UploadInfo{Bucket: s.bucket, Key: key, ETag: o.ETag, Size: o.Size, LastModified: o.LastModified}, true, nil
}

// checksummed returns the CRC32C of size bytes of r and a reader of the
// same bytes: r itself, rewound, when it can seek (the bytes in memory or
// a local staging file are read twice rather than held twice), else a
// copy in memory (at most a part).
func checksummed(r io.Reader, size int64) (io.ReadSeeker, uint32, error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		start, err := rs.Seek(0, io.SeekCurrent)
		if err == nil {
			h := crc32.New(castagnoli)
			if _, err := io.CopyN(h, rs, size); err != nil {
				return nil, 0, fmt.Errorf("checksum the body: %w", err)
			}
			if _, err := rs.Seek(start, io.SeekStart); err != nil {
				return nil, 0, fmt.Errorf("rewind the body: %w", err)
			}
			return rs, h.Sum32(), nil
		}
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, 0, fmt.Errorf("read the body: %w", err)
	}
	return bytes.NewReader(data), crc32.Checksum(data, castagnoli), nil
}

// putParts uploads r as parts of PartSize (larger when size needs more
// than S3's 10,000 of them), up to Concurrency at a time.
// A file (an io.ReaderAt: the staging files) is sent straight from its
// sections, read once for the checksum and once on the wire, so that a
// large upload holds no memory: files are staged precisely when memory is
// short. Any other reader is read into Concurrency part buffers in turn.
// The upload is aborted on any failure: nothing of it stays.
// The upload completes on the condition that the object is version etag
// (AnyVersion: none).
func (s *Store) putParts(ctx context.Context, key, etag string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	partSize, err := store.PartSizeFor(size, s.maxParts, int64(s.cfg.PartSize))
	if err != nil {
		return store.Object{}, fmt.Errorf("put %q: %w", key, err)
	}
	up, err := s.NewUpload(ctx, key, etag, meta)
	if err != nil {
		return store.Object{}, err
	}
	u := up.(*upload)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ra, isFile := r.(io.ReaderAt)
	// free holds the slots of parts in flight; with a plain reader, each
	// slot's buffer (allocated on first use: small uploads need fewer).
	free := make(chan []byte, s.cfg.Concurrency)
	for range s.cfg.Concurrency {
		free <- nil
	}
	var wg sync.WaitGroup
	for n, off := 1, int64(0); off < size; n, off = n+1, off+partSize {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		k := min(partSize, size-off)
		var part io.Reader
		if isFile {
			part = io.NewSectionReader(ra, off, k)
		} else {
			if buf == nil {
				buf = make([]byte, partSize)
			}
			if _, err := io.ReadFull(r, buf[:k]); err != nil {
				cancel(fmt.Errorf("read part %d of %q: %w", n, key, err))
				break
			}
			part = bytes.NewReader(buf[:k])
		}
		body, sum, err := checksummed(part, k)
		if err != nil {
			cancel(fmt.Errorf("part %d of %q: %w", n, key, err))
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := u.putPart(ctx, n, body, k, sum); err != nil {
				cancel(err)
			}
			free <- buf
		}()
	}
	wg.Wait()
	err = context.Cause(ctx)
	if err == nil {
		var o store.Object
		if o, err = up.Complete(ctx); err == nil {
			return o, nil
		}
	}
	// A fresh context: the caller's may be what ended the upload.
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer acancel()
	if aerr := up.Abort(actx); aerr != nil {
		err = errors.Join(err, aerr)
	}
	return store.Object{}, fmt.Errorf("put %q: %w", key, err)
}
