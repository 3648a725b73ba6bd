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
// Secret takes effect without remounting.
const refreshEvery = time.Minute

// fileProvider reads credentials from files and re-reads them periodically.
type fileProvider struct {
	dir     string
	mu      sync.Mutex
	expires time.Time
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
	v, err := p.read()
	if err == nil {
		p.mu.Lock()
		p.expires = time.Now().Add(refreshEvery)
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
	return time.Now().After(p.expires)
}
