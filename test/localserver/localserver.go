// Package localserver holds what the test servers (miniotest,
// versitytest) share: finding a server binary installed with go install,
// and a free loopback address for it.
package localserver

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
)

// Binary finds name: $env when set, then $PATH, then $GOPATH/bin. The
// error says how to install it (install is the go install argument).
func Binary(name, env, install string) (string, error) {
	if b := os.Getenv(env); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath(name); err == nil {
		return b, nil
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	b := filepath.Join(gopath, "bin", name)
	if _, err := os.Stat(b); err != nil {
		return "", fmt.Errorf("%s binary not found (install with: go install %s): %w", name, install, err)
	}
	return b, nil
}

// FreeAddr is a loopback host:port nothing listens on now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
