package fusefs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// A bucket as a directory: files written through the mount are objects in
// the store once closed, and objects put in the store are files. Here the
// store is in memory; s3store.New serves a real bucket the same way.
func Example() {
	st := memstore.New()
	mnt, err := os.MkdirTemp("", "objfuse-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.Remove(mnt)
	staging, err := os.MkdirTemp("", "objfuse-staging-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(staging)

	fsys, err := fusefs.New(st, fusefs.Options{StagingDir: staging})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := fsys.Mount(mnt, "objfuse:example", true) // directMount: as root
	if err != nil {
		log.Fatal(err)
	}
	defer fsys.Close()
	defer srv.Unmount()

	// A file closed is an object.
	if err := os.WriteFile(filepath.Join(mnt, "hello.txt"), []byte("hello, bucket\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	body, err := st.Get(context.Background(), "hello.txt", store.AnyVersion, 0, -1)
	if err != nil {
		log.Fatal(err)
	}
	object, _ := io.ReadAll(body)
	body.Close()
	fmt.Printf("object hello.txt: %q\n", object)

	// An object is a file, in the directory its key names.
	greeting := []byte("from S3\n")
	if _, err := st.Put(context.Background(), "docs/greeting.txt", bytes.NewReader(greeting), int64(len(greeting)), nil); err != nil {
		log.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(mnt, "docs", "greeting.txt"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("file docs/greeting.txt: %q\n", file)
	// Output:
	// object hello.txt: "hello, bucket\n"
	// file docs/greeting.txt: "from S3\n"
}
