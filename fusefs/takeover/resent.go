package takeover

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// uniqueResend is FUSE_UNIQUE_RESEND: the kernel sets it in the unique
// of each request it queues again at FUSE_NOTIFY_RESEND.
const uniqueResend = 1 << 63

// mayBeDone says a predecessor read the request and died before
// answering it, so that it may have done it: the kernel resent it, and
// the predecessor did not hand over (HandOver holds requests before they
// start). A request that changes a name and finds its change already
// made is answered as done, not with EEXIST or ENOENT for what its
// caller asked once. Other changes are the same when done twice (a write
// at an offset, a truncate, an fsync), or were in the dead process's
// memory only (a handle's writes: see handle.owes).
func (t *FS) mayBeDone(h *fuse.InHeader) bool {
	return h.Unique&uniqueResend != 0 && !t.handedOver
}

// madeBefore answers a resent request that makes parent/name (mkdir,
// mknod, symlink, link, create with O_EXCL) and met EEXIST: done if the
// name is of the type the request makes (and, for want other than 0, is
// inner node want). innerParent is the parent's inner id. It fills out
// with the inner node, as the inner filesystem's answer would; the
// caller takes it in (entered: the predecessor's journal may hold it).
func (t *FS) madeBefore(cancel <-chan struct{}, innerParent uint64, name string, mode uint32, want uint64, out *fuse.EntryOut) bool {
	st := t.inner.Lookup(cancel, &fuse.InHeader{NodeId: innerParent}, name, out)
	if !st.Ok() || out.NodeId == 0 {
		return false
	}
	if out.Mode&syscall.S_IFMT != mode&syscall.S_IFMT || want != 0 && out.NodeId != want {
		t.inner.Forget(out.NodeId, 1)
		return false
	}
	t.log.Info("a request the dead mounter did before it could answer is answered as done", "made", name)
	return true
}

// eexist is the status of a name already taken.
var eexist = fuse.Status(syscall.EEXIST)

// removedBefore says whether a resent unlink or rmdir that met ENOENT
// was the predecessor's to do.
func (t *FS) removedBefore(h *fuse.InHeader, st fuse.Status, name string) bool {
	if !t.mayBeDone(h) || st != fuse.ENOENT {
		return false
	}
	t.log.Info("a request the dead mounter did before it could answer is answered as done", "removed", name)
	return true
}

// renamedBefore says whether a resent rename that failed with st was
// done by the predecessor: the old name is gone and the new one is
// there. in has inner ids.
func (t *FS) renamedBefore(cancel <-chan struct{}, h *fuse.InHeader, in *fuse.RenameIn, st fuse.Status, oldName, newName string) bool {
	if !t.mayBeDone(h) || in.Flags&renameExchange != 0 || st != fuse.ENOENT && st != fuse.Status(syscall.EEXIST) {
		return false
	}
	var out fuse.EntryOut
	if t.inner.Lookup(cancel, &fuse.InHeader{NodeId: in.NodeId}, oldName, &out).Ok() {
		t.inner.Forget(out.NodeId, 1)
		return false
	}
	if !t.inner.Lookup(cancel, &fuse.InHeader{NodeId: in.Newdir}, newName, &out).Ok() {
		return false
	}
	t.inner.Forget(out.NodeId, 1)
	t.log.Info("a request the dead mounter did before it could answer is answered as done", "renamed", oldName, "to", newName)
	return true
}
