package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// A peek is a HEAD with the object's first bytes: the same attributes and
// metadata as the HEAD, the object's size (not the range's), and its
// bytes up to the length asked, for objects longer and shorter than that
// and empty ones; a missing object is ErrNotExist. A whole peek (a plain
// GET) answers the same, the longer objects included.
func TestPeekIsAHeadWithTheFirstBytes(t *testing.T) {
	for _, whole := range []bool{false, true} {
		t.Run(map[bool]string{false: "range", true: "whole"}[whole], func(t *testing.T) { testPeek(t, whole) })
	}
}

func testPeek(t *testing.T, whole bool) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	st, err := s3store.New(srv.Config(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	long := bytes.Repeat([]byte("0123456789"), 30_000)
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"long", long},
		{"short", long[:1000]},
		{"exact", long[:4096]},
		{"empty", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := srv.Client().PutObject(ctx, bucket, c.name, bytes.NewReader(c.data), int64(len(c.data)),
				minio.PutObjectOptions{UserMetadata: map[string]string{"mode": "33188"}}); err != nil {
				t.Fatal(err)
			}
			head, err := st.Head(ctx, c.name)
			if err != nil {
				t.Fatal(err)
			}
			dest := bytes.Repeat([]byte{0xee}, 4096+1)
			o, n, err := st.Peek(ctx, c.name, dest[:4096], whole)
			if err != nil {
				t.Fatal(err)
			}
			data := dest[:n]
			if o.Key != head.Key || o.Size != head.Size || o.ETag != head.ETag || !o.LastModified.Equal(head.LastModified) || o.Metadata["mode"] != "33188" {
				t.Errorf("peek %+v, HEAD %+v", o, head)
			}
			if want := c.data[:min(4096, len(c.data))]; !bytes.Equal(data, want) {
				t.Errorf("peek's bytes: %d of them, want the first %d", len(data), len(want))
			}
			if dest[4096] != 0xee {
				t.Error("the peek wrote past its buffer")
			}
		})
	}
	if _, _, err := st.Peek(ctx, "missing", make([]byte, 4096), whole); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("peek of a missing object: %v, want ErrNotExist", err)
	}
}
