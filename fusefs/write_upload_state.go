package fusefs

import (
	"syscall"
	"time"
)

// uploadState is where a file's local content stands with its upload, and
// which failure its writers have still to hear of. It is a fileNode's,
// guarded by the node's mu. Its rules:
//   - content lost for good (a stream whose upload failed, a write that
//     lost data, a file that lost its name) fails every write, close and
//     fsync until the last close;
//   - an upload that failed after an asynchronous close fails the next
//     close or fsync, once;
//   - content closed asynchronously whose upload fails for good is
//     reported lost (Health), once, unless a writer's close or fsync
//     already returned the failure and nothing was written since.
type uploadState struct {
	dirty bool // local content differs from the object
	// since is when the content last came to differ from the object.
	since time.Time
	lost  error // what lost the content, reported until the last close
	owed  error // a failure after an asynchronous close, for the next close or fsync
	last  error // the last upload failure, for logs and owed
	// async: a close(2) returned before the content it left was
	// uploaded. Should that upload fail, whoever makes it (the last
	// RELEASE, a drain, an fsync), the loss is reported (Health), as
	// that writer may never hear of it.
	async bool
	// told: the latest failed upload was returned to a writer's close(2)
	// or fsync, and nothing was written since.
	told bool
}

// pending says the local content is not in the store yet.
func (u *uploadState) pending() bool { return u.dirty }

// written: the content changed. A failure a writer heard of is no longer
// the latest word on it.
func (u *uploadState) written() {
	if !u.dirty {
		u.since = time.Now()
	}
	u.dirty, u.told = true, false
}

// dirtySince is when the content not uploaded yet began to be written.
func (u *uploadState) dirtySince() time.Time { return u.since }

// settled: nothing is left to upload: the content went up, was dropped,
// or lost its name.
func (u *uploadState) settled() { u.dirty, u.async = false, false }

// restored: journaled content that a close acknowledged before a restart
// waits for its upload.
func (u *uploadState) restored() { u.dirty, u.async, u.since = true, true, time.Now() }

// closedAsync: a close(2) returned before the content was uploaded.
func (u *uploadState) closedAsync() { u.async = true }

// awaitsAsyncUpload says content a close acknowledged without uploading
// it has still to go up.
func (u *uploadState) awaitsAsyncUpload() bool { return u.dirty && u.async }

// answered records what a writer's close(2) or fsync returned: a failure
// it returned, the last RELEASE need not report again.
func (u *uploadState) answered(e syscall.Errno) { u.told = e != 0 }

// lose records what lost the content, or keeps it from ever being
// uploaded; the first such failure is the one kept.
func (u *uploadState) lose(err error) {
	if u.lost == nil {
		u.lost = err
	}
}

// lostTo is what lost the content; nil while nothing has.
func (u *uploadState) lostTo() error { return u.lost }

// failed records an upload's failure.
func (u *uploadState) failed(err error) { u.last = err }

// lastFailure is the last upload's failure.
func (u *uploadState) lastFailure() error { return u.last }

// owe has the next close(2) or fsync fail with err.
func (u *uploadState) owe(err error) { u.owed = err }

// takeOwed returns, once, the failure the next close or fsync owes its
// writer.
func (u *uploadState) takeOwed() error {
	err := u.owed
	u.owed = nil
	return err
}

// lastRelease begins the upload the last RELEASE makes of what is left:
// no writer waits to hear of its failure, which is therefore reported as
// a loss, unless a writer's close or fsync already returned it. It
// reports whether the content was closed asynchronously: its writer is
// then owed the failure too.
func (u *uploadState) lastRelease() (closedAsync bool) {
	closedAsync = u.async
	u.async = !u.told
	return closedAsync
}

// tellLoss says, once, whether a loss of the content is to be reported:
// it was closed asynchronously, and its writer may never hear of it.
func (u *uploadState) tellLoss() bool {
	if !u.async {
		return false
	}
	u.async = false
	return true
}

// lastClosed: every writer has closed the file; a loss is no longer
// reported to the next one.
func (u *uploadState) lastClosed() { u.lost = nil }
