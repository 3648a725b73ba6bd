package s3store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Names of the files a credentials directory holds. They match the keys of
// the Kubernetes Secret the driver mounts.
const (
	AccessKeyFile    = "accessKeyID"
	SecretKeyFile    = "secretAccessKey"
	SessionTokenFile = "sessionToken"
)

// refreshEvery is how often credentials are re-read, so that a rotated
// Secret takes effect without remounting; changeCheckEvery is how often
// the files are checked for a change, which makes them re-read at once.
const (
	refreshEvery     = time.Minute
	changeCheckEvery = time.Second
)

// fileProvider reads credentials from files and re-reads them when they
// change (kubelet swaps a Secret volume's files for new ones), and every
// refreshEvery in any case.
type fileProvider struct {
	dir      string
	mu       sync.Mutex
	expires  time.Time
	checked  time.Time     // when the files were last checked for a change
	lastRead []os.FileInfo // the credential files as last read
}

func (p *fileProvider) read() (credentials.Value, error) {
	get := func(name string, required bool) (string, error) {
		b, err := os.ReadFile(filepath.Join(p.dir, name))
		if os.IsNotExist(err) && !required {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("credentials: %w", err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" && required {
			return "", fmt.Errorf("credentials: %s is empty", filepath.Join(p.dir, name))
		}
		return v, nil
	}
	var v credentials.Value
	var err error
	if v.AccessKeyID, err = get(AccessKeyFile, true); err != nil {
		return v, err
	}
	if v.SecretAccessKey, err = get(SecretKeyFile, true); err != nil {
		return v, err
	}
	if v.SessionToken, err = get(SessionTokenFile, false); err != nil {
		return v, err
	}
	v.SignerType = credentials.SignatureV4
	return v, nil
}

func (p *fileProvider) Retrieve() (credentials.Value, error) {
	files := p.stat()
	v, err := p.read()
	if err == nil {
		p.mu.Lock()
		p.expires = time.Now().Add(refreshEvery)
		p.checked, p.lastRead = time.Now(), files
		p.mu.Unlock()
	}
	return v, err
}

func (p *fileProvider) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	return p.Retrieve()
}

func (p *fileProvider) IsExpired() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.After(p.expires) {
		return true
	}
	if now.Sub(p.checked) < changeCheckEvery {
		return false
	}
	p.checked = now
	files := p.stat()
	for i, fi := range files {
		if changed(fi, p.lastRead[i]) {
			// Expired until read again: callers ask more than once.
			p.expires = time.Time{}
			return true
		}
	}
	return false
}

// changed says whether a file (nil: missing) is not the one it was.
func changed(now, was os.FileInfo) bool {
	if now == nil || was == nil {
		return now != was
	}
	return !os.SameFile(now, was) || !now.ModTime().Equal(was.ModTime()) || now.Size() != was.Size()
}

// stat describes the credential files (nil for a missing one), to tell
// when they change.
func (p *fileProvider) stat() []os.FileInfo {
	out := make([]os.FileInfo, 0, 3)
	for _, name := range []string{AccessKeyFile, SecretKeyFile, SessionTokenFile} {
		fi, _ := os.Stat(filepath.Join(p.dir, name))
		out = append(out, fi)
	}
	return out
}
