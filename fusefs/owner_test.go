package fusefs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// What a non-root process creates is its own, and it can go on writing
// into the directories it made (a pod running as a non-root user).
func TestNonRootCallerOwnsWhatItCreates(t *testing.T) {
	const uid, gid = 1000, 2000
	// The mount's own defaults are root's, with a root anyone may write in.
	// The mount point's parents must be searchable by the caller.
	parent, err := os.MkdirTemp("", "objfuse-owner-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fusefs.New(memstore.New(), fusefs.Options{DirMode: 0o777, PartSize: 5 << 20, StagingDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := f.Mount(dir, "objfuse:test", true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Unmount() })

	cmd := exec.Command("/bin/sh", "-c", `set -e; cd "$1"; mkdir d; echo x > d/f; ln -s d/f l; mkdir d/e; echo y > d/e/g`, "sh", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("non-root shell: %v: %s", err, out)
	}
	for _, name := range []string{"d", "d/f", "l", "d/e", "d/e/g"} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != gid {
			t.Errorf("%s is owned by %d:%d, want the caller %d:%d", name, st.Uid, st.Gid, uid, gid)
		}
	}
}
