// Command s3 is the small S3 client make demo and the e2e setup use
// against the local MinIO (no mc on these machines):
//
//	go run ./test/local/s3 [-endpoint URL] wait|mb BUCKET|ls [BUCKET [PREFIX]]|cat BUCKET KEY
//
// Credentials come from S3_ACCESS_KEY and S3_SECRET_KEY (default
// minioadmin, the local MinIO's). `wait` polls until the endpoint answers.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func main() {
	endpoint := flag.String("endpoint", getenv("S3_ENDPOINT", "http://127.0.0.1:9000"), "S3 endpoint URL")
	timeout := flag.Duration("timeout", 2*time.Minute, "how long `wait` waits")
	flag.Parse()
	if err := run(*endpoint, *timeout, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "s3:", err)
		os.Exit(1)
	}
}

func run(endpoint string, timeout time.Duration, args []string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(getenv("S3_ACCESS_KEY", "minioadmin"), getenv("S3_SECRET_KEY", "minioadmin"), ""),
		Secure:       u.Scheme == "https",
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if len(args) == 0 {
		args = []string{"ls"}
	}
	switch {
	case args[0] == "wait":
		deadline := time.Now().Add(timeout)
		for {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := c.ListBuckets(cctx)
			cancel()
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not answer within %v: %v", endpoint, timeout, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	case args[0] == "mb" && len(args) == 2:
		ok, err := c.BucketExists(ctx, args[1])
		if err != nil || ok {
			return err
		}
		return c.MakeBucket(ctx, args[1], minio.MakeBucketOptions{})
	case args[0] == "ls" && len(args) == 1:
		bs, err := c.ListBuckets(ctx)
		for _, b := range bs {
			fmt.Printf("%s  %s/\n", b.CreationDate.Format(time.RFC3339), b.Name)
		}
		return err
	case args[0] == "ls" && len(args) <= 3:
		prefix := ""
		if len(args) == 3 {
			prefix = args[2]
		}
		for o := range c.ListObjects(ctx, args[1], minio.ListObjectsOptions{Prefix: prefix, Recursive: true, WithMetadata: true}) {
			if o.Err != nil {
				return o.Err
			}
			fmt.Printf("%s %10d  s3://%s/%s\n", o.LastModified.Format(time.RFC3339), o.Size, args[1], o.Key)
		}
		return nil
	case args[0] == "cat" && len(args) == 3:
		o, err := c.GetObject(ctx, args[1], args[2], minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		defer o.Close()
		_, err = io.Copy(os.Stdout, o)
		return err
	}
	return fmt.Errorf("usage: s3 [-endpoint URL] wait | mb BUCKET | ls [BUCKET [PREFIX]] | cat BUCKET KEY")
}
