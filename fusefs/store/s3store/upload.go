package s3store

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store"
)

type upload struct {
	s    *Store
	key  string
	id   string
	meta map[string]string
	// ifMatch, unless AnyVersion, is the version the object must be for
	// Complete to store the upload.
	ifMatch string

	mu    sync.Mutex
	parts []minio.CompletePart
}

func (s *Store) NewUpload(ctx context.Context, key, etag string, meta map[string]string) (store.Upload, error) {
	opts := s.putOptions(meta)
	// Parts carry a CRC32C, which AWS S3 refuses ("Checksum Type mismatch
	// ... expected checksum Type: null") unless the upload was started
	// with the algorithm; Core does not add the header from AutoChecksum.
	opts.UserMetadata[checksumAlgorithmHeader] = "CRC32C"
	var id string
	err := s.untilDeadline(ctx, func(ctx context.Context) (err error) {
		id, err = s.core.NewMultipartUpload(ctx, s.bucket, key, opts)
		return s.fail(err)
	})
	if err != nil {
		return nil, fmt.Errorf("start upload of %q: %w", key, err)
	}
	return &upload{s: s, key: key, id: id, meta: meta, ifMatch: etag}, nil
}

func (u *upload) PutPart(ctx context.Context, number int, part io.ReaderAt, size int64) error {
	body, sum, err := checksummed(io.NewSectionReader(part, 0, size), size)
	if err != nil {
		return fmt.Errorf("part %d of %q: %w", number, u.key, err)
	}
	return u.putPart(ctx, number, body, size, sum)
}

// putPart sends size bytes of body, whose CRC32C is sum, as part number.
// body must be at its start: minio-go rewinds it to 0 for a retry.
func (u *upload) putPart(ctx context.Context, number int, body io.ReadSeeker, size int64, sum uint32) error {
	crc := crc32cBase64(sum)
	h := http.Header{}
	h.Set(checksumHeader, crc)
	h.Set(checksumAlgorithmHeader, "CRC32C")
	var p minio.ObjectPart
	err := u.s.untilDeadline(ctx, func(ctx context.Context) error {
		if _, err := body.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("rewind the part: %w", err)
		}
		var err error
		p, err = u.s.core.PutObjectPart(ctx, u.s.bucket, u.key, u.id, number,
			body, size, minio.PutObjectPartOptions{CustomHeader: h, DisableContentSha256: true})
		return u.s.fail(err)
	})
	if err != nil {
		return fmt.Errorf("upload part %d of %q: %w", number, u.key, err)
	}
	sent := minio.CompletePart{PartNumber: number, ETag: p.ETag, ChecksumCRC32C: crc}
	u.mu.Lock()
	defer u.mu.Unlock()
	if i := slices.IndexFunc(u.parts, func(p minio.CompletePart) bool { return p.PartNumber == number }); i >= 0 {
		u.parts[i] = sent // S3 keeps the part sent last under a number
		return nil
	}
	u.parts = append(u.parts, sent)
	return nil
}

func (u *upload) Complete(ctx context.Context) (store.Object, error) {
	u.mu.Lock()
	parts := slices.Clone(u.parts)
	u.mu.Unlock()
	slices.SortFunc(parts, func(a, b minio.CompletePart) int { return a.PartNumber - b.PartNumber })
	var opts minio.PutObjectOptions
	if u.ifMatch != store.AnyVersion {
		opts.SetMatchETag(u.ifMatch)
	}
	var info minio.UploadInfo
	err := u.s.untilDeadline(ctx, func(ctx context.Context) (err error) {
		info, err = u.s.core.CompleteMultipartUpload(ctx, u.s.bucket, u.key, u.id, parts, opts)
		if code := minio.ToErrorResponse(err).Code; code == "NoSuchUpload" || (u.ifMatch != store.AnyVersion && code == "PreconditionFailed") {
			// A retry (minio-go's or ours) after a reply lost on the
			// way: the upload may be gone, or the object no longer the
			// version it named, because it completed.
			done, ok, serr := u.completedAlready(ctx, parts)
			switch {
			case ok:
				info, err = done, nil
			case serr != nil:
				return u.s.fail(serr) // try again: it may have been stored
			}
		}
		return u.s.fail(err)
	})
	if err != nil {
		return store.Object{}, fmt.Errorf("complete upload of %q: %w", u.key, err)
	}
	return store.Object{Key: u.key, Size: info.Size, ETag: info.ETag, LastModified: info.LastModified, Metadata: lower(u.meta)}, nil
}

// completedAlready says whether the object at u's key is this upload,
// completed: its ETag is the one S3 gives a multipart object, the MD5 of
// its parts' MD5s and their count, and only these parts make it.
// An error says the object could not be looked at (not that it is
// absent): whether it was stored is not known yet.
func (u *upload) completedAlready(ctx context.Context, parts []minio.CompletePart) (minio.UploadInfo, bool, error) {
	sums := md5.New()
	for _, p := range parts {
		b, err := hex.DecodeString(strings.Trim(p.ETag, `"`))
		if err != nil {
			return minio.UploadInfo{}, false, nil // not an MD5: cannot tell
		}
		sums.Write(b)
	}
	want := fmt.Sprintf("%x-%d", sums.Sum(nil), len(parts))
	o, err := u.s.client.StatObject(ctx, u.s.bucket, u.key, minio.StatObjectOptions{})
	if err != nil {
		if errors.Is(mapErr(err), store.ErrNotExist) {
			return minio.UploadInfo{}, false, nil
		}
		return minio.UploadInfo{}, false, err
	}
	if !strings.EqualFold(strings.Trim(o.ETag, `"`), want) {
		return minio.UploadInfo{}, false, nil
	}
	return minio.UploadInfo{Bucket: u.s.bucket, Key: u.key, ETag: o.ETag, Size: o.Size, LastModified: o.LastModified}, true, nil
}

func (u *upload) Abort(ctx context.Context) error {
	if err := u.s.core.AbortMultipartUpload(ctx, u.s.bucket, u.key, u.id); err != nil {
		return fmt.Errorf("abort upload of %q: %w", u.key, u.s.fail(err))
	}
	return nil
}
