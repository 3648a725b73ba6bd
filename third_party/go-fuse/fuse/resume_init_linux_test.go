// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

// Unit tests of MountOptions.ResumeInit and the takeover notifications
// on a socket pair standing in for /dev/fuse: a SOCK_SEQPACKET socket
// keeps message boundaries, as the device does, so the test sees
// exactly what the server reads and writes.

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func structBytes[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// testInitIn is an INIT as a Linux 6.18 kernel sends it.
func testInitIn(minor uint32, flags uint64) *InitIn {
	in := &InitIn{
		InHeader:     InHeader{Opcode: _OP_INIT, Unique: 2},
		Major:        _FUSE_KERNEL_VERSION,
		Minor:        minor,
		MaxReadAhead: 128 << 10,
		Flags:        uint32(flags),
		Flags2:       uint32(flags >> 32),
	}
	in.Length = uint32(unsafe.Sizeof(*in))
	return in
}

const testKernelFlags = CAP_ASYNC_READ | CAP_POSIX_LOCKS | CAP_BIG_WRITES | CAP_FLOCK_LOCKS |
	CAP_AUTO_INVAL_DATA | CAP_READDIRPLUS | CAP_NO_OPEN_SUPPORT | CAP_PARALLEL_DIROPS |
	CAP_POSIX_ACL | CAP_MAX_PAGES | CAP_CACHE_SYMLINKS | CAP_EXPLICIT_INVAL_DATA | CAP_INIT_EXT |
	CAP_PASSTHROUGH | CAP_HAS_RESEND | CAP_ALLOW_IDMAP

// testGetAttr is a request queued behind INIT.
func testGetAttr() []byte {
	in := GetAttrIn{InHeader: InHeader{Opcode: _OP_GETATTR, Unique: 4, NodeId: FUSE_ROOT_ID}}
	in.Length = uint32(unsafe.Sizeof(in))
	return bytes.Clone(structBytes(&in))
}

// socketServer starts a Server on one end of a socket pair after
// queueing msgs on it, and returns the server and the other end.
func socketServer(t *testing.T, opts MountOptions, msgs ...[]byte) (*Server, int, error) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	t.Cleanup(func() { unix.Close(fds[1]) })
	for _, msg := range msgs {
		if _, err := unix.Write(fds[1], msg); err != nil {
			t.Fatalf("queueing request: %v", err)
		}
	}
	ms, err := NewServer(NewDefaultRawFileSystem(), fmt.Sprintf("/dev/fd/%d", fds[0]), &opts)
	if err != nil {
		unix.Close(fds[0])
		return nil, fds[1], err
	}
	// NewServer owns the descriptor now.
	t.Cleanup(func() { ms.fuseFD.close() })
	return ms, fds[1], nil
}

// received returns the next message the server wrote, or nil if none.
func received(t *testing.T, fd int) []byte {
	t.Helper()
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
	if errors.Is(err, unix.EAGAIN) {
		return nil
	} else if err != nil {
		t.Fatalf("reading the server's reply: %v", err)
	}
	return buf[:n]
}

// TestResumeInitMatchesInit checks that a server resuming from an INIT
// message ends up in the state a server that read and answered it is
// in, without reading from or writing to the connection.
func TestResumeInitMatchesInit(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts MountOptions
	}{
		{"defaults", MountOptions{}},
		{"tuned", MountOptions{MaxWrite: 64 << 10, MaxReadAhead: 32 << 10, MaxBackground: 64, EnableLocks: true, EnableAcl: true}},
		{"restricted", MountOptions{ExplicitDataCacheControl: true, DisableReadDirPlus: true, SyncRead: true, DisableSplice: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testInitIn(45, testKernelFlags)

			initSrv, initPeer, err := socketServer(t, tc.opts, structBytes(in))
			if err != nil {
				t.Fatalf("NewServer reading INIT: %v", err)
			}
			reply := received(t, initPeer)
			var wantOut InitOut
			var fresh protocolServer
			fresh.opts = initSrv.opts
			if st := fresh.negotiateInit(in, &wantOut); st != OK {
				t.Fatalf("negotiateInit: %v", st)
			}
			wantReply := append(structBytes(&OutHeader{Length: uint32(int(sizeOfOutHeader) + int(unsafe.Sizeof(wantOut))), Unique: in.Unique}), structBytes(&wantOut)...)
			if !bytes.Equal(reply, wantReply) {
				t.Errorf("INIT reply\n%x, want\n%x", reply, wantReply)
			}

			opts := tc.opts
			opts.ResumeInit = initSrv.KernelSettings()
			resumeSrv, resumePeer, err := socketServer(t, opts, testGetAttr())
			if err != nil {
				t.Fatalf("NewServer resuming: %v", err)
			}
			if msg := received(t, resumePeer); msg != nil {
				t.Errorf("resuming server wrote %x, want nothing", msg)
			}
			var queued []byte
			resumeSrv.fuseFD.withFD(func(fd int) {
				buf := make([]byte, 4096)
				n, _, err := unix.Recvfrom(fd, buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
				if err == nil {
					queued = buf[:n]
				}
			})
			if !bytes.Equal(queued, testGetAttr()) {
				t.Errorf("queued request after resuming: %x; want it unread", queued)
			}

			if *resumeSrv.KernelSettings() != *in {
				t.Errorf("resumed KernelSettings %+v, want %+v", resumeSrv.KernelSettings(), in)
			}
			if resumeSrv.negotiatedFlags != initSrv.negotiatedFlags {
				t.Errorf("resumed negotiated flags %#x, want %#x", resumeSrv.negotiatedFlags, initSrv.negotiatedFlags)
			}
			if resumeSrv.canSplice != initSrv.canSplice {
				t.Errorf("resumed canSplice %v, want %v", resumeSrv.canSplice, initSrv.canSplice)
			}
		})
	}
}

// TestResumeInitRejectsBadVersion: a resumed INIT goes through the
// same version checks as a read one.
func TestResumeInitRejectsBadVersion(t *testing.T) {
	for _, in := range []*InitIn{
		{Major: _FUSE_KERNEL_VERSION + 1, Minor: 45},
		{Major: _FUSE_KERNEL_VERSION, Minor: _MINIMUM_MINOR_VERSION - 1},
	} {
		if _, _, err := socketServer(t, MountOptions{ResumeInit: in}); err == nil {
			t.Errorf("NewServer resuming from INIT %d.%d succeeded, want an error", in.Major, in.Minor)
		}
	}
}

// TestResendEpochNotify checks the messages ResendNotify and
// IncEpochNotify write, and that they are not sent to a kernel that
// does not know them (it would fail the write with EINVAL).
func TestResendEpochNotify(t *testing.T) {
	header := func(code Status) []byte {
		// Notifications carry the positive FUSE_NOTIFY_* code in
		// the error field and a zero unique.
		return bytes.Clone(structBytes(&OutHeader{Length: uint32(sizeOfOutHeader), Status: int32(-code)}))
	}
	for _, tc := range []struct {
		name        string
		in          *InitIn
		resend      Status
		epoch       Status
		wantWritten [][]byte
	}{
		{"6.18", testInitIn(45, testKernelFlags), OK, OK, [][]byte{header(NOTIFY_RESEND), header(NOTIFY_INC_EPOCH)}},
		{"6.9", testInitIn(40, testKernelFlags), OK, ENOSYS, [][]byte{header(NOTIFY_RESEND)}},
		{"6.8", testInitIn(39, testKernelFlags&^CAP_HAS_RESEND), ENOSYS, ENOSYS, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, peer, err := socketServer(t, MountOptions{ResumeInit: tc.in})
			if err != nil {
				t.Fatalf("NewServer: %v", err)
			}
			if st := srv.ResendNotify(); st != tc.resend {
				t.Errorf("ResendNotify: %v, want %v", st, tc.resend)
			}
			if st := srv.IncEpochNotify(); st != tc.epoch {
				t.Errorf("IncEpochNotify: %v, want %v", st, tc.epoch)
			}
			var written [][]byte
			for msg := received(t, peer); msg != nil; msg = received(t, peer) {
				written = append(written, msg)
			}
			if fmt.Sprintf("%x", written) != fmt.Sprintf("%x", tc.wantWritten) {
				t.Errorf("written %x, want %x", written, tc.wantWritten)
			}
		})
	}
}
