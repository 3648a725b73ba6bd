package fusefs

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
)

// Whatever metadata another tool wrote (mode, uid, gid, mtime headers),
// a directory stays a directory, a file is a file or a symlink with
// permission bits only, and attributes written back read the same.
func FuzzAttrsFromMetadata(f *testing.F) {
	f.Add("33188", "1000", "1000", "1700000000", false)
	f.Add("16877", "0", "0", "1700000000.5", true)
	f.Add("41471", "-1", "4294967296", "x.y", false)
	f.Fuzz(func(t *testing.T, mode, uid, gid, mtime string, dir bool) {
		fsys := &FS{opts: Options{}.WithDefaults(), mountTime: time.Unix(1, 0)}
		kind := uint32(syscall.S_IFREG)
		if dir {
			kind = syscall.S_IFDIR
		}
		o := store.Object{Key: "k", Size: 7, Metadata: map[string]string{metaMode: mode, metaUID: uid, metaGID: gid, metaMtime: mtime}}
		a := fsys.attrsOf(o, kind)
		switch typ := a.mode & syscall.S_IFMT; {
		case dir && typ != syscall.S_IFDIR:
			t.Fatalf("a directory with mode %q became type %o", mode, typ)
		case !dir && typ != syscall.S_IFREG && typ != syscall.S_IFLNK:
			t.Fatalf("a file with mode %q became type %o", mode, typ)
		}
		if a.mode&^(syscall.S_IFMT|07777) != 0 {
			t.Fatalf("mode %q gave bits %o beyond type and permissions", mode, a.mode)
		}
		back := fsys.attrsOf(store.Object{Key: "k", Size: 7, Metadata: a.metadata()}, kind)
		if back.mode != a.mode || back.uid != a.uid || back.gid != a.gid || back.mtime.Unix() != a.mtime.Unix() {
			t.Fatalf("attributes %+v written back read %+v", a, back)
		}
	})
}

// A listed key shows as a name only when that name, joined to its
// directory again, is the key: no name from a key climbs out of its
// directory or aliases another path.
func FuzzChildName(f *testing.F) {
	f.Add("a/", "a/b")
	f.Add("a/", "a/b/")
	f.Add("", "../x")
	f.Add("d/", "d//e")
	f.Fuzz(func(t *testing.T, dirKey, key string) {
		if !strings.HasPrefix(key, dirKey) {
			return // listings return keys under the directory only
		}
		name, isPrefix := childName(dirKey, key)
		if !validName(name) {
			return // hidden, counted
		}
		want := dirKey + name
		if isPrefix {
			want += "/"
		}
		if want != key {
			t.Fatalf("key %q in %q shows as %q (dir %v), which names %q", key, dirKey, name, isPrefix, want)
		}
		if strings.Contains(name, "/") || name == "." || name == ".." {
			t.Fatalf("key %q in %q shows as %q", key, dirKey, name)
		}
	})
}
