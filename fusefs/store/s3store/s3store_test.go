package s3store_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// Check answers from the first page of a listing; a bucket with more
// than one object used to fail it with the cancel of the next page.
func TestCheckNonEmptyBucket(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	for _, k := range []string{"a", "b", "c/d"} {
		if _, err := srv.Client().PutObject(context.Background(), bucket, k, strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s3store.New(srv.Config(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if err := st.Check(context.Background()); err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
	}
}

// A MinIO listing tells an object without user metadata (known: none)
// from a server that sends no metadata (unknown), so that lookups after a
// listing need no HEAD.
func TestListingCarriesKnownEmptyMetadata(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	c := srv.Client()
	c.PutObject(context.Background(), bucket, "plain", strings.NewReader("x"), 1, minio.PutObjectOptions{})
	c.PutObject(context.Background(), bucket, "meta", strings.NewReader("x"), 1, minio.PutObjectOptions{UserMetadata: map[string]string{"mode": "33188"}})
	st, err := s3store.New(srv.Config(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for e, err := range st.List(context.Background(), "", "", false) {
		if err != nil {
			t.Fatal(err)
		}
		got[e.Key] = e.Object.Metadata
	}
	if m, ok := got["plain"]; !ok || m == nil || len(m) != 0 {
		t.Errorf("plain object's metadata %#v, want known-empty", m)
	}
	if got["meta"]["mode"] != "33188" {
		t.Errorf("meta object's metadata %#v", got["meta"])
	}
}

// A bucket in another region than the one requests are signed for is
// named with the region to configure.
func TestWrongRegionIsNamed(t *testing.T) {
	srv := miniotest.StartInRegion(t, "eu-west-1")
	bucket := srv.NewBucket(t)
	cfg := srv.Config()
	cfg.Region = "us-east-1"
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	err = st.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), `set the StorageClass parameter "region" (objfuse-mount: --region) to eu-west-1`) || !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("check: %v", err)
	}
}

// A size no object can have (negative, or beyond any S3 server's largest
// object) is never a file of that size: a HEAD saying so is an error, and
// a listing leaves the entry out (the rest of the directory still lists).
func TestImpossibleSizesAreRefused(t *testing.T) {
	for _, size := range []string{"-5", "1152921504606846976"} { // 1 EiB
		t.Run(size, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
				w.Header().Set("ETag", `"e"`)
				if r.Method == http.MethodHead {
					w.Header().Set("Content-Length", size)
					return
				}
				w.Header().Set("Content-Type", "application/xml")
				fmt.Fprintf(w, `<ListBucketResult><Name>bkt</Name><IsTruncated>false</IsTruncated>`+
					`<Contents><Key>f</Key><Size>%s</Size><ETag>"e"</ETag><LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>`+
					`<Contents><Key>g</Key><Size>1</Size><ETag>"e"</ETag><LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents></ListBucketResult>`, size)
			}))
			defer srv.Close()
			st, err := s3store.New(s3store.Config{Endpoint: srv.URL, Region: "us-east-1", PathStyle: true, MaxRetries: 1,
				Keys: &s3store.Keys{AccessKeyID: "k", SecretAccessKey: "secret"}}, "bkt")
			if err != nil {
				t.Fatal(err)
			}
			if o, err := st.Head(t.Context(), "f"); err == nil {
				t.Errorf("HEAD answering Content-Length %s: an object of %d bytes, want an error", size, o.Size)
			}
			var listed []string
			for e, err := range st.List(t.Context(), "", "", false) {
				if err != nil {
					t.Fatalf("a listing with one impossible size: %v", err)
				}
				listed = append(listed, fmt.Sprintf("%s:%d", e.Key, e.Object.Size))
			}
			if fmt.Sprint(listed) != "[g:1]" {
				t.Errorf("a listing giving f a size of %s lists %v, want only g", size, listed)
			}
		})
	}
}
