package fusefs

import (
	"fmt"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/objfuse/objfuse/fusefs/takeover"
)

// Resume is what a successor needs to serve a connection a predecessor
// served: the kernel's INIT, which the kernel sends once per connection,
// and the predecessor's journal of node ids and handles.
type Resume struct {
	Init  fuse.InitIn
	Saved *takeover.Saved
	// Reply is the predecessor's INIT reply, whose terms the kernel
	// keeps; nil if it left none (an older mounter).
	Reply *fuse.InitOut
}

// ServeTakeover serves the FUSE handle at fdPath (/dev/fd/N) so that a
// successor can take the connection over: node ids and handles go
// through a takeover.FS journaling at journalPath. With resume, the
// connection is a predecessor's: no INIT is read, and what the
// predecessor gave out is revived as the kernel uses it, after the kernel
// queues again the requests the predecessor read and never answered.
func (f *FS) ServeTakeover(fdPath, fsName, journalPath string, resume *Resume) (*fuse.Server, *takeover.FS, error) {
	o := f.MountOptions(fsName)
	if f.opts.ReadOnly {
		o.Options = append(o.Options, "ro")
	}
	var prev *takeover.Saved
	if resume != nil {
		f.inherited = true
		prev = resume.Saved
		init := resume.Init
		o.ResumeInit = &init
	}
	tfs, err := takeover.New(journalPath, prev, f.opts.Logger, func(cb fs.ServerCallbacks) fuse.RawFileSystem {
		opts := *o
		opts.ServerCallbacks = cb
		return fs.NewNodeFS(f.Root(), &opts)
	})
	if err != nil {
		return nil, nil, err
	}
	srv, err := fuse.NewServer(tfs, fdPath, &o.MountOptions)
	if err != nil {
		tfs.Close()
		return nil, nil, fmt.Errorf("serve %s on %s: %w", fsName, fdPath, err)
	}
	if resume != nil && resume.Reply != nil && !sameTerms(srv.InitReply(), *resume.Reply) {
		// Not served: nothing was read from the connection.
		tfs.Close()
		got, want := srv.InitReply(), *resume.Reply
		return nil, nil, fmt.Errorf("this mounter's FUSE terms differ from those the kernel keeps from the previous one (max write %d, readahead %d, flags %#x; the kernel's: %d, %d, %#x): it cannot serve the connection",
			got.MaxWrite, got.MaxReadAhead, got.Flags64(), want.MaxWrite, want.MaxReadAhead, want.Flags64())
	}
	if resume != nil && !resume.Saved.HandedOver {
		// The predecessor died: while no one served, other clients may
		// have changed names the kernel has cached. It looks each up
		// again (Linux 6.16 and later; before, each expires within its
		// entry timeout, and one whose node is gone answers ESTALE, on
		// which the kernel looks the path up again).
		if st := srv.IncEpochNotify(); !st.Ok() && st != fuse.ENOSYS {
			f.opts.Logger.Warn("the kernel did not take a new epoch; names it cached expire on their own", "status", st)
		}
	}
	if resume != nil {
		// Before the first read: requests this server reads would be
		// on the list the kernel resends too, and would run twice.
		if st := srv.ResendNotify(); !st.Ok() {
			f.opts.Logger.Error("the kernel did not resend what the previous mounter read; those calls wait until their callers give up", "status", st)
		}
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		tfs.Close()
		return nil, nil, fmt.Errorf("serve %s on %s: %w", fsName, fdPath, err)
	}
	f.uploadRestored()
	return srv, tfs, nil
}

// sameTerms says a successor's INIT reply, got, is what the kernel keeps
// from its predecessor's, kept. Where a predecessor asked for
// AUTO_INVAL_DATA (objfuse before it stopped asking) and its successor
// does not, the kernel goes on dropping pages on a new mtime, as it did:
// the successor never relies on it doing so or not.
func sameTerms(got, kept fuse.InitOut) bool {
	const unrelied = uint32(fuse.CAP_AUTO_INVAL_DATA)
	got.Flags &^= unrelied
	kept.Flags &^= unrelied
	return got == kept
}
