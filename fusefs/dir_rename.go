package fusefs

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/objfuse/objfuse/fusefs/store"
)

// renameNoReplace and renameExchange are rename2(2) flags.
const (
	renameNoReplace = 1
	renameExchange  = 2
)

// Rename moves a file with a server-side copy and a delete, and a
// directory by moving every object under it the same way. S3 has no
// atomic rename: a crash midway can leave both copies, never neither.
func (n *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx = uninterruptible(ctx) // a change half made must be finished
	if n.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	if flags&renameExchange != 0 {
		return syscall.EINVAL
	}
	dst, ok := newParent.(*dirNode)
	if !ok || !validName(newName) {
		return syscall.EINVAL
	}
	srcKey, dstKey := n.key()+name, dst.key()+newName
	src, err := n.kindOf(ctx, name)
	if err != nil {
		return errno(err)
	}
	target, terr := dst.kindOf(ctx, newName)
	switch {
	case terr != nil && !errors.Is(terr, store.ErrNotExist):
		return errno(terr)
	case terr == nil && flags&renameNoReplace != 0:
		return syscall.EEXIST
	case terr == nil && src.isDir && !target.isDir:
		return syscall.ENOTDIR
	case terr == nil && !src.isDir && target.isDir:
		return syscall.EISDIR
	case terr == nil && src.isDir:
		if empty, err := n.fsys.isEmptyDir(ctx, dstKey+"/"); err != nil {
			return errno(err)
		} else if !empty {
			return syscall.ENOTEMPTY
		}
	}
	if err := n.keepAlive(ctx); err != nil {
		return errno(err)
	}
	// What was written under the source before the rename reaches S3
	// first, so that the copies take it; what is changed under it
	// during the rename waits for it (keyGate) and goes to the new name.
	if errno := n.syncUnder(ctx, name); errno != 0 {
		return errno
	}
	// A file the rename replaces is unlinked like one removed: its open
	// handles keep its content (read before the copy overwrites it, and
	// before the gate, as keeping it may upload what they wrote), and
	// nothing they write is uploaded under any name.
	var replaced *fileNode
	if ch := dst.GetChild(newName); !src.isDir && ch != nil && ch != n.GetChild(name) {
		if replaced, _ = ch.Operations().(*fileNode); replaced != nil {
			replaced.keepForUnlink(ctx)
		}
	}
	var removed int64 // what the file renamed over takes off the quota's count
	if !src.isDir {
		removed = dst.removedSize(replaced, newName)
	}
	from, to := srcKey, dstKey
	if src.isDir {
		from, to = srcKey+"/", dstKey+"/"
	}
	done := n.fsys.gate.move(from, to)
	if n.key()+name != srcKey || dst.key()+newName != dstKey {
		// A rename of a directory above moved both while this one
		// waited: start again from the new names.
		done()
		return n.Rename(ctx, name, newParent, newName, flags)
	}
	// What takes a node's lock waits until the move is done: a sync
	// holding that lock may be waiting in the gate for these keys.
	var afterMove []func()
	defer func() {
		done()
		for _, f := range afterMove {
			f()
		}
	}()
	moved := n.GetChild(name)
	if src.isDir {
		if errno := n.renameDir(ctx, name, from, to); errno != 0 {
			return errno
		}
		dst.noteChild(newName, &dirEntry{name: newName, isDir: true})
	} else {
		o, err := n.fsys.store.Copy(ctx, srcKey, store.AnyVersion, dstKey, nil)
		if err != nil {
			return errno(err)
		}
		if moved != nil {
			if f, ok := moved.Operations().(*fileNode); ok {
				f.own.note(o.ETag)
			}
		}
		n.fsys.countRemoved(removed)
		if replaced != nil {
			// Its key goes now (a sync that wakes finds it has no name
			// and keeps its bytes), the rest once the move is done.
			n.fsys.placeRemoved(&replaced.Inode)
			afterMove = append(afterMove, replaced.markUnlinked)
		}
		if err := n.fsys.store.Delete(ctx, srcKey); err != nil {
			return errno(err)
		}
		dst.forgetChildAttrs(newName, o)
	}
	if j := n.fsys.journal; j != nil {
		// A file journaled under the old name before the move began
		// (between syncUnder and the gate) is restored under the new.
		if err := j.rekey(from, to); err != nil {
			n.fsys.opts.Logger.Error("rename: journal records keep the old name", "from", from, "to", to, "err", err)
		}
	}
	if moved != nil {
		// Before done: what the move held back takes the new name.
		n.fsys.place(moved, dst.EmbeddedInode(), newName)
	}
	n.noteChild(name, nil)
	return 0
}

// syncUnder uploads what was written to name, a file, or to the files
// under it, a directory.
func (n *dirNode) syncUnder(ctx context.Context, name string) syscall.Errno {
	ch := n.GetChild(name)
	if ch == nil {
		return 0
	}
	if f, ok := ch.Operations().(*fileNode); ok {
		return f.sync(ctx)
	}
	var failed syscall.Errno
	walkFiles(ch, func(f *fileNode) {
		if e := f.sync(ctx); e != 0 {
			failed = e
		}
	})
	return failed
}

// forgetChildAttrs records a renamed-in file; its metadata comes from the
// copy's source, which the listing may not show, so a lookup will HEAD.
func (n *dirNode) forgetChildAttrs(name string, o store.Object) {
	o.Metadata = nil
	n.noteChild(name, &dirEntry{name: name, obj: o})
}

// kindOf says whether name in n is a directory, without creating an inode.
func (n *dirNode) kindOf(ctx context.Context, name string) (resolved, error) {
	if ch := n.GetChild(name); ch != nil {
		if _, ok := ch.Operations().(*fileNode); ok && ch.Operations().(*fileNode).isLocal() {
			return resolved{}, nil
		}
	}
	return n.fsys.resolve(ctx, n.key()+name, directoryWins)
}

// isEmptyDir reports whether nothing but a marker lies under prefix.
func (f *FS) isEmptyDir(ctx context.Context, prefix string) (bool, error) {
	for e, err := range f.store.List(ctx, prefix, "", false) {
		if err != nil {
			return false, err
		}
		if e.IsPrefix() || e.Key != prefix {
			return false, nil
		}
	}
	return true, nil
}

// renameDir moves every object under srcPrefix to dstPrefix: all copies
// first, then all deletes, so that a failure leaves the source whole.
// The caller holds the gate's move of both prefixes.
func (n *dirNode) renameDir(ctx context.Context, name, srcPrefix, dstPrefix string) syscall.Errno {
	var keys []string
	markers := map[string]store.Object{} // empty keys ending in "/"
	hasMarker := false
	for e, err := range n.fsys.store.List(ctx, srcPrefix, "", true) {
		if err != nil {
			return errno(err)
		}
		if len(keys) >= n.fsys.opts.MaxRenameObjects {
			// Too big to move here; mv falls back to copy and delete.
			return syscall.EXDEV
		}
		keys = append(keys, e.Key)
		hasMarker = hasMarker || e.Key == srcPrefix
		if strings.HasSuffix(e.Key, "/") && e.Size == 0 {
			markers[e.Key] = e.Object
		}
	}
	if !hasMarker {
		// The directory must exist at its new name even if it was implicit.
		n.mu.Lock()
		a := n.attr
		n.mu.Unlock()
		a.mode = syscall.S_IFDIR | uint32(n.fsys.opts.DirMode)
		if ch := n.GetChild(name); ch != nil {
			if d, ok := ch.Operations().(*dirNode); ok {
				d.mu.Lock()
				a = d.attr
				d.mu.Unlock()
			}
		}
		if _, err := n.fsys.store.Put(ctx, dstPrefix, strings.NewReader(""), 0, a.metadata()); err != nil {
			return errno(err)
		}
	}
	var copiedMu sync.Mutex
	copied := map[string]string{} // source key → its copy's ETag
	copyOne := func(k string) error {
		dst := dstPrefix + strings.TrimPrefix(k, srcPrefix)
		if m, ok := markers[k]; ok {
			return n.fsys.copyMarker(ctx, m, dst)
		}
		o, err := n.fsys.store.Copy(ctx, k, store.AnyVersion, dst, nil)
		if err == nil {
			copiedMu.Lock()
			copied[k] = o.ETag
			copiedMu.Unlock()
		}
		return err
	}
	if err := n.fsys.parallel(keys, copyOne); err != nil {
		return errno(err)
	}
	if ch := n.GetChild(name); ch != nil {
		// The copies are this mount's versions of the files it knows.
		walkFiles(ch, func(f *fileNode) { f.own.note(copied[n.fsys.keyOf(&f.Inode)]) })
	}
	if errno := n.fsys.deleteTree(ctx, keys, markers); errno != 0 {
		return errno
	}
	if ch := n.GetChild(name); ch != nil {
		if d, ok := ch.Operations().(*dirNode); ok {
			d.mu.Lock()
			d.hasMarker = true
			d.markerSeq++
			d.mu.Unlock()
			d.forgetTree()
		}
	}
	return 0
}

// copyMarker writes the directory marker m anew at dst, with its
// attributes: servers that keep objects as files (versitygw) hold a marker
// as the directory itself, and refuse to copy it.
func (f *FS) copyMarker(ctx context.Context, m store.Object, dst string) error {
	if m.Metadata == nil { // listed without metadata
		h, err := f.store.Head(ctx, m.Key)
		if err != nil {
			return err
		}
		m = h
	}
	// Another tool's metadata goes along, as a server-side copy would
	// take it; the attributes are this marker's.
	meta := maps.Clone(m.Metadata)
	maps.Copy(meta, f.attrsOf(m, syscall.S_IFDIR).metadata())
	_, err := f.store.Put(ctx, dst, bytes.NewReader(nil), 0, meta)
	return err
}

// forgetTree drops cached listings below a moved directory.
func (n *dirNode) forgetTree() {
	n.forget()
	for _, ch := range n.Children() {
		if d, ok := ch.Operations().(*dirNode); ok {
			d.forgetTree()
		}
	}
}

// parallel runs fn on every key with up to 4×Concurrency at once and
// returns the first error.
func (f *FS) parallel(keys []string, fn func(string) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	work := make(chan string)
	for range min(len(keys), 4*f.opts.Concurrency) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				if err := fn(k); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	return first
}

// deleteTree deletes keys: the files first, side by side, then the
// directory markers among them, deepest first. A server that keeps
// objects as files (versitygw) keeps a directory whose marker went
// while files were still in it (it could not remove it), and a stat of
// the old name found it after the rename; and a rename cut short leaves
// directories that still say what they hold, not files without them.
func (f *FS) deleteTree(ctx context.Context, keys []string, markers map[string]store.Object) syscall.Errno {
	var files, dirs []string
	for _, k := range keys {
		if _, ok := markers[k]; ok {
			dirs = append(dirs, k)
		} else {
			files = append(files, k)
		}
	}
	if err := f.parallel(files, func(k string) error { return f.store.Delete(ctx, k) }); err != nil {
		return errno(err)
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, k := range dirs {
		if err := f.store.Delete(ctx, k); err != nil {
			return errno(err)
		}
	}
	return 0
}
