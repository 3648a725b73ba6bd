package fusefs_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// mountPointForAnyone makes a mount point whose parents a non-root caller
// can search (t.TempDir's are root's alone).
func mountPointForAnyone(t *testing.T) string {
	t.Helper()
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
	return dir
}

// What a non-root process creates is its own, and it can go on writing
// into the directories it made (a pod running as a non-root user).
func TestNonRootCallerOwnsWhatItCreates(t *testing.T) {
	const uid, gid = 1000, 2000
	// The mount's own defaults are root's, with a root anyone may write in.
	dir := mountPointForAnyone(t)
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

// With a mount group (a pod's fsGroup, VOLUME_MOUNT_GROUP) everything on
// the mount has that group: whatever any process of the pod creates,
// whichever its own group, in directories made before and since (which
// are set-group-ID, as kubelet makes a volume's for an fsGroup), a chgrp
// changes nothing, and a later pod with another fsGroup sees its own on
// all of it (the upstream storage suite's fsgroupchangepolicy specs).
func TestMountGroupOwnsWhatThePodCreates(t *testing.T) {
	const uid, ownGID, fsGroup = 1000, 3000, 2000
	dir := mountPointForAnyone(t)
	st := memstore.New()
	if _, err := st.Put(context.Background(), "before/old.txt", strings.NewReader("made by another client"), 22, nil); err != nil {
		t.Fatal(err)
	}
	// A file whose metadata names another group: shown as the mount's,
	// kept as it is for every other client, even when touched.
	if _, err := st.Put(context.Background(), "kept.txt", strings.NewReader("x"), 1, map[string]string{"gid": "3333"}); err != nil {
		t.Fatal(err)
	}
	f, err := fusefs.New(st, fusefs.Options{PartSize: 5 << 20, StagingDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	f.SetMountGroup(fsGroup)
	srv, err := f.Mount(dir, "objfuse:test", true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Unmount() })
	var made []string

	for _, c := range []struct {
		who  string
		cred *syscall.Credential
	}{
		{"root", &syscall.Credential{}},
		{"a member", &syscall.Credential{Uid: uid, Gid: ownGID, Groups: []uint32{fsGroup}}},
	} {
		id := fmt.Sprint(c.cred.Uid)
		cmd := exec.Command("/bin/sh", "-c", `set -e; cd "$1"; touch "f-$2"; mkdir "d-$2"; touch "d-$2/g"; mkdir "d-$2/e"; touch "before/n-$2"`, "sh", dir, id)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", c.who, err, out)
		}
		for _, name := range []string{"f-" + id, "d-" + id, "d-" + id + "/g", "d-" + id + "/e", "before", "before/n-" + id} {
			fi, err := os.Lstat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Gid != fsGroup {
				t.Errorf("%s made by %s has group %d, want the mount group %d", name, c.who, st.Gid, fsGroup)
			}
			if fi.IsDir() && st.Mode&syscall.S_ISGID == 0 {
				t.Errorf("directory %s (%s) is not set-group-ID: mode %o", name, c.who, st.Mode)
			}
			made = append(made, name)
		}
	}
	if out, err := exec.Command("touch", filepath.Join(dir, "kept.txt")).CombinedOutput(); err != nil {
		t.Fatalf("touch: %v %s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "kept.txt")); err != nil || fi.Sys().(*syscall.Stat_t).Gid != fsGroup {
		t.Errorf("kept.txt: %v, want the mount group %d shown", err, fsGroup)
	}
	if o, err := st.Head(context.Background(), "kept.txt"); err != nil || o.Metadata["gid"] != "3333" {
		t.Errorf("kept.txt's metadata after a touch: %v %v, want its own group 3333 kept", o.Metadata, err)
	}
	if out, err := exec.Command("chgrp", "0", filepath.Join(dir, "f-0")).CombinedOutput(); err != nil {
		t.Fatalf("chgrp: %v %s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "f-0")); err != nil || fi.Sys().(*syscall.Stat_t).Gid != fsGroup {
		t.Errorf("after chgrp 0: %v, want the mount group %d still", err, fsGroup)
	}
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}

	// The next pod, with another fsGroup.
	const next = 4000
	g, err := fusefs.New(st, fusefs.Options{PartSize: 5 << 20, StagingDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	g.SetMountGroup(next)
	srv2, err := g.Mount(dir, "objfuse:test", true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv2.Unmount() })
	for _, name := range append(made, "f-0", "before/old.txt") {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if gid := fi.Sys().(*syscall.Stat_t).Gid; gid != next {
			t.Errorf("%s has group %d under the next pod's fsGroup, want %d", name, gid, next)
		}
	}
}
