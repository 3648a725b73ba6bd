package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sync/errgroup"

	"github.com/objfuse/objfuse/fusefs/store"
)

// errCloseWaits: the content cannot be journaled, so the close waits for
// its upload: a stream whose parts already went up lives in a multipart
// upload and in memory, not in a file.
var errCloseWaits = errors.New("content streamed in parts is uploaded before close returns")

// journalLocked keeps the file's content in the journal, for an
// asynchronous close to return before its upload.
func (n *fileNode) journalLocked(ctx context.Context) error {
	if !n.local() {
		return nil // only attributes changed; nothing is lost with them
	}
	if n.stream != nil && n.stream.started() {
		return errCloseWaits
	}
	if err := n.toStaging(ctx); err != nil { // a stream's buffer: no request
		return err
	}
	if n.staging.id == "" {
		return errCloseWaits // a staging file made before the journal was (never)
	}
	// Inside the gate the key is the one an upload would take now: a
	// directory rename under way moves it first.
	key, leave, err := n.fsys.gate.enterAt(n.linkedKey)
	if err != nil {
		return err
	}
	defer leave()
	a := n.attr
	if !n.mtimeSet {
		// What this upload would set; a successor keeps it (restoreFile).
		a.mtime = time.Now()
	}
	r := journalRecord{Key: key, Base: n.base, Stored: n.stored, Metadata: a.metadata()}
	if err := n.fsys.journal.write(n.staging.id, r, n.attr.size); err != nil {
		return err
	}
	n.staging.journaled = true
	n.dropFrozenLocked() // superseded: a restart takes this content now
	return nil
}

// journalAgain journals content a failed unlink took out of the journal
// (keepForUnlink): the file is still there, and its close acknowledged.
func (n *fileNode) journalAgain(ctx context.Context) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.upload.awaitsAsyncUpload() && !n.unlinked && n.fsys.journal != nil {
		if err := n.journalLocked(ctx); err != nil {
			n.fsys.opts.Logger.Error("journal a file whose unlink failed", "key", n.key(), "err", err)
		}
	}
}

// keepJournaledLocked is called before the staging content changes: if
// it is journaled (what a close acknowledged), the change goes on in a
// copy, and the journaled content stays as it is (frozen) until newer
// content replaces it in the journal or in the store.
func (n *fileNode) keepJournaledLocked() error {
	if n.staging == nil || !n.staging.journaled {
		return nil
	}
	size, err := n.staging.size()
	if err != nil {
		return err
	}
	cp, err := n.fsys.stagingFrom(size, "journaled content", func() (io.ReadCloser, error) {
		return io.NopCloser(io.NewSectionReader(n.staging.f, 0, size)), nil
	})
	if err != nil {
		return err
	}
	n.dropFrozenLocked() // an older one, superseded by the staging's record
	// Parts sent early are of the content that goes on in the copy, but
	// were read from the file frozen: they start over there.
	n.staging.parts.discard()
	n.staging.parts = nil
	n.frozen, n.staging = n.staging, cp
	return nil
}

// takeJournaledLocked detaches the journaled content, frozen or not, for
// the caller to keep while the rest is dropped.
func (n *fileNode) takeJournaledLocked() *stagingFile {
	if f := n.frozen; f != nil {
		n.frozen = nil
		return f
	}
	if n.staging != nil && n.staging.journaled {
		st := n.staging
		n.staging = nil
		st.parts.discard() // kept for its record, not uploaded from here
		st.parts = nil
		return st
	}
	return nil
}

// dropFrozenLocked removes frozen content and its record.
func (n *fileNode) dropFrozenLocked() {
	if n.frozen != nil {
		n.frozen.Close()
		n.frozen = nil
	}
}

// settleJournalLocked takes the file out of the journal: its content is
// in the store, or is not to be uploaded (unlinked).
func (n *fileNode) settleJournalLocked() {
	if n.staging != nil && n.staging.id != "" {
		n.fsys.journal.settle(n.staging.id)
		n.staging.journaled = false
	}
	n.dropFrozenLocked()
}

// leaveJournaledLocked leaves the file's journal entry on disk when its
// upload was cut by the process's stop: a successor in the same pod (the
// container restarted) uploads it; should the pod go instead, it was
// reported lost.
func (n *fileNode) leaveJournaledLocked() {
	if !errors.Is(n.upload.lastFailure(), ErrStopped) {
		return
	}
	for _, st := range []*stagingFile{n.staging, n.frozen} {
		if st != nil && st.id != "" {
			n.fsys.journal.forget(st.id)
			st.id, st.journaled = "", false
		}
	}
}

// restoreJournal places the files an earlier process journaled and did
// not upload into the tree, with their content, for Mount to upload
// (uploadRestored). The root calls it when it is added to a mount.
func (f *FS) restoreJournal(ctx context.Context) {
	if f.journal == nil {
		return
	}
	for _, bad := range f.journal.unreadable {
		f.opts.Logger.Error("a journal record cannot be read; it is set aside with its data, for a person to look at", "dir", f.journal.dir, "record", bad)
	}
	f.journal.unreadable = nil
	if len(f.journal.restored) == 0 {
		return
	}
	records := f.journal.restored
	f.journal.restored = nil
	var nodes []*fileNode
	for _, r := range records {
		n, err := f.restoreFile(ctx, r)
		if err != nil {
			// Left in the journal, for a person to look at: nothing is
			// uploaded under a name made up for it.
			f.opts.Logger.Error("not restoring a file journaled by an earlier mounter; it stays in the journal", "dir", f.journal.dir, "id", r.id, "err", err)
			continue
		}
		nodes = append(nodes, n)
	}
	f.restoredNodes = nodes
}

// uploadRestored uploads the files restoreJournal placed, once the mount
// serves: not while go-fuse is still mounting and answering INIT, which
// must not wait for anything the uploads hold.
func (f *FS) uploadRestored() {
	nodes := f.restoredNodes
	f.restoredNodes = nil
	if len(nodes) == 0 {
		return
	}
	f.opts.Logger.Info("uploading files closed before the mounter restarted", "files", len(nodes))
	go func() {
		var g errgroup.Group
		g.SetLimit(restoreUploads)
		for _, n := range nodes {
			g.Go(func() error {
				n.mu.Lock()
				defer n.mu.Unlock()
				if n.opens == 0 { // else the last close uploads it
					n.uploadLeftLocked()
				}
				return nil
			})
		}
		g.Wait()
	}()
}

// restoreUploads bounds the uploads of restored files at a time.
const restoreUploads = 16

// restoreFile makes the node of a journaled file, at its key's path.
func (f *FS) restoreFile(ctx context.Context, r journalRecord) (*fileNode, error) {
	rel, ok := strings.CutPrefix(r.Key, f.opts.Prefix)
	if !ok {
		return nil, fmt.Errorf("key %q is not under the mount's prefix %q", r.Key, f.opts.Prefix)
	}
	names := strings.Split(rel, "/")
	for _, name := range names {
		if !validName(name) {
			return nil, fmt.Errorf("key %q cannot be a file's path", r.Key)
		}
	}
	dir := f.root
	for _, name := range names[:len(names)-1] {
		ch := dir.GetChild(name)
		if ch == nil {
			ch = dir.newChild(ctx, syscall.S_IFDIR, f.dirAttrs(), false)
			dir.AddChild(name, ch, true)
		}
		d, ok := ch.Operations().(*dirNode)
		if !ok {
			return nil, fmt.Errorf("key %q: %q is a file and a directory", r.Key, name)
		}
		dir = d
	}
	file, err := f.journal.openData(r.id)
	if err != nil {
		return nil, err
	}
	st := &stagingFile{fsys: f, f: file, id: r.id}
	size, err := st.size()
	if err != nil {
		file.Close()
		return nil, err
	}
	// Counted whatever the limit says now: the bytes are on the disk.
	f.staged.Add(size)
	st.reserved = size
	a := f.attrsOf(store.Object{Key: r.Key, Size: size, Metadata: r.Metadata}, syscall.S_IFREG)
	name := names[len(names)-1]
	st.journaled = true
	if ch := dir.GetChild(name); ch != nil {
		// Journaled twice (a crash between a newer record and the
		// removal of the older; records sort by age): the newer wins.
		if old, ok := ch.Operations().(*fileNode); ok {
			old.mu.Lock()
			old.dropLocal()
			old.staging, old.attr, old.base, old.stored = st, a, r.Base, r.Stored
			old.upload.restored()
			old.mu.Unlock()
			return old, nil
		}
		st.id = "" // left in the journal (and pending), as the caller says
		st.Close()
		return nil, fmt.Errorf("key %q: %q is a directory", r.Key, name)
	}
	n := &fileNode{fsys: f, attr: a, attrAt: time.Now(), stored: r.Stored, staging: st, base: r.Base, mtimeSet: true}
	n.upload.restored()
	dir.AddChild(name, dir.adopt(ctx, n, syscall.S_IFREG), true)
	return n, nil
}

// OnAdd restores the journal when the root is added to a mount.
func (n *dirNode) OnAdd(ctx context.Context) {
	if n == n.fsys.root {
		n.fsys.restoreJournal(ctx)
	}
}

var _ fs.NodeOnAdder = (*dirNode)(nil)
