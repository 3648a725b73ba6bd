package s3store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

// secretVolume writes creds as kubelet writes a Secret volume: files in a
// timestamped directory, reached through the ..data symlink, which an
// update swaps atomically for one to a new directory.
type secretVolume struct {
	dir string
	gen int
}

func (v *secretVolume) write(t *testing.T, creds map[string]string) {
	t.Helper()
	v.gen++
	data := fmt.Sprintf("..gen%d", v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, data), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, value := range creds {
		if err := os.WriteFile(filepath.Join(v.dir, data, name), []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(data, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// Rotated keys in a Secret volume take effect within seconds, in the
// store that is already serving: a mount outlives any one set of keys.
func TestRotatedCredentialsTakeEffect(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	vol := &secretVolume{dir: t.TempDir()}
	vol.write(t, map[string]string{s3store.AccessKeyFile: miniotest.AccessKey, s3store.SecretKeyFile: miniotest.SecretKey})
	cfg := srv.Config()
	cfg.CredentialsDir = vol.dir
	st, err := s3store.New(cfg, bucket)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := st.Put(ctx, "before", strings.NewReader("x"), 1, nil); err != nil {
		t.Fatal(err)
	}

	srv.RestartWithCredentials("rotated-key", "rotated-secret-key")
	if _, err := st.Head(ctx, "before"); err == nil {
		t.Fatal("the old keys still work after the server's rotation")
	}
	vol.write(t, map[string]string{s3store.AccessKeyFile: "rotated-key", s3store.SecretKeyFile: "rotated-secret-key"})
	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := st.Head(ctx, "before")
		if err == nil {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("rotated keys not used after %v: %v", time.Since(start), err)
		}
		<-tick.C
	}
	t.Logf("rotated keys in use after %v", time.Since(start))
}
