package fusefs

import (
	"slices"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
)

// Health is what a mount's owner must know and cannot see from one
// failed system call: why the store refuses requests now, and files that
// were closed (asynchronously) but never reached the store.
type Health struct {
	// Problem is why the store's requests fail now, when a person must
	// fix it (see store.Health); nil while they work or when the store
	// does not say.
	Problem error
	// ProblemSince is when the store's requests began to fail so.
	ProblemSince time.Time
	// LostUploads counts files whose upload no writer waited for failed
	// (after an asynchronous close, or of writes through a mapping that
	// outlived its descriptors): their data is not in the store. The next
	// fsync or close of such a file fails too, but its writer may never
	// open it again.
	LostUploads int64
	// LastLostUpload names the latest of them and why it failed.
	LastLostUpload string
	// LostFiles are the keys of the latest MaxNamed of them, oldest
	// first: the files a person must write again.
	LostFiles []string
	// PendingUploads are files closed asynchronously whose upload has not
	// succeeded yet, PendingBytes their size, and PendingFiles the first
	// MaxNamed of their keys, sorted: what is lost should the journal
	// go before they are uploaded (the mounter pod deleted).
	PendingUploads int64
	PendingBytes   int64
	PendingFiles   []string
	// Conflicts counts changes to files that another writer replaced
	// meanwhile: each was kept under a conflict name, and its writer's
	// close or fsync failed (with asyncClose, no writer may have heard).
	Conflicts int64
	// LastConflict names the latest file and where its change is kept.
	LastConflict string
}

// Health reports the mount's Health.
func (f *FS) Health() Health {
	var h Health
	if r, ok := f.store.(store.HealthReporter); ok {
		sh := r.Health()
		h.Problem, h.ProblemSince = sh.Problem, sh.Since
	}
	f.tally.Lock() // lost and pending as of one moment (giveUpLocked)
	h.LostUploads = f.stats.AsyncUploadErrors.Load()
	if p := f.lostUpload.Load(); p != nil {
		h.LastLostUpload = *p
	}
	f.lostMu.Lock()
	h.LostFiles = slices.Clone(f.lostFiles)
	f.lostMu.Unlock()
	h.PendingUploads, h.PendingBytes = f.stats.PendingUploads.Load(), f.stats.PendingBytes.Load()
	if f.journal != nil {
		h.PendingFiles = f.journal.pendingKeys(MaxNamed)
	}
	f.tally.Unlock()
	h.Conflicts = f.stats.Conflicts.Load()
	if p := f.lastConflict.Load(); p != nil {
		h.LastConflict = *p
	}
	return h
}

// MaxNamed bounds the keys Health lists of lost and of pending files.
const MaxNamed = 20

// noteLostUpload counts the lost upload of key; err says why.
func (f *FS) noteLostUpload(key string, err error) {
	msg := err.Error()
	f.lostUpload.Store(&msg)
	f.lostMu.Lock()
	f.lostFiles = append(f.lostFiles, key)
	if len(f.lostFiles) > MaxNamed {
		f.lostFiles = slices.Delete(f.lostFiles, 0, len(f.lostFiles)-MaxNamed)
	}
	f.lostMu.Unlock()
	f.stats.AsyncUploadErrors.Add(1)
}

// noteConflict counts a change kept under a conflict name; err says
// which and where.
func (f *FS) noteConflict(err error) {
	msg := err.Error()
	f.lastConflict.Store(&msg)
	f.stats.Conflicts.Add(1)
	f.opts.Logger.Error("write conflict: another writer replaced the file; the change made here is kept under a conflict name", "err", err)
}
