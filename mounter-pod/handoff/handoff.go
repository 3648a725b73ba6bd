// Package handoff is the protocol between the node plugin and a mounter:
// the node plugin (privileged: mounter-pod/mounts) opens /dev/fuse and mounts it, then passes
// the open FUSE handle over a Unix socket with SCM_RIGHTS to the mounter
// (unprivileged), which serves it. One JSON request and one JSON answer per
// connection keep it debuggable with socat.
package handoff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SocketName is the mounter's socket inside a volume's shared directory.
const SocketName = "mounter.sock"

// MountDirName is the FUSE mountpoint inside a volume's shared directory.
const MountDirName = "mnt"

// Ops a node plugin may ask for.
const (
	OpServe  = "serve"  // with a FUSE fd attached: serve it
	OpStatus = "status" // report state
	// OpExit, at NodeUnstage: upload what is pending and release the
	// connection; the node unmounts next, and the mounter then waits for a
	// new handle (a later NodeStage on this node) until its pod is deleted.
	OpExit = "exit"
	// OpLend asks a serving mounter for a duplicate of the FUSE handle it
	// serves, attached to the answer: a node plugin that restarted gets
	// back the duplicate it keeps so that the connection outlives the
	// mounter (a successor takes it over, see Request.TakeOver).
	OpLend = "lend"
	// OpHandOver asks a serving mounter to hand its connection to a
	// successor: it stops taking requests (those that come wait, and the
	// kernel gives them to the successor), finishes those under way,
	// uploads everything written, and exits non-zero, so that its
	// container restarts (with a new image, after an upgrade) and takes
	// the connection over. No write is lost, none fails.
	OpHandOver = "handover"
	// OpResize, at NodeExpandVolume, gives a serving mounter its volume's
	// new size (Request.CapacityBytes) at once; mounters elsewhere read
	// it where the expansion recorded it at their next count.
	OpResize = "resize"
)

// ExitHandedOver is the exit code of a mounter that handed its connection
// over (OpHandOver): non-zero, so that its container restarts (restartPolicy
// OnFailure) and the successor takes the connection over. It is no
// failure, even when kubelet holds the restart back (CrashLoopBackOff).
const ExitHandedOver = 75

// Modes a mount survives its mounter in (Reply.Mode).
const (
	// ModeTakeover: the node plugin keeps the connection open; a
	// successor mounter resumes it and the kernel resends what the dead
	// one never answered. Pods see a pause, not an error.
	ModeTakeover = "takeover"
	// ModeRepair: the connection dies with its mounter; the node plugin
	// mounts again and binds the new mount where the old one was.
	ModeRepair = "repair"
)

// Request is what the node plugin sends.
type Request struct {
	Op string `json:"op"`
	// MountGroup, with OpServe, is the group id (a pod's fsGroup) that
	// files without owner metadata get; nil keeps the mounter's own.
	MountGroup *uint32 `json:"mountGroup,omitempty"`
	// TakeOver, with OpServe: the attached handle is a live connection an
	// earlier mounter of this volume served (it died, or handed over):
	// resume it from the state that mounter saved, without INIT.
	TakeOver bool `json:"takeOver,omitempty"`
	// Kept, with OpServe: the node plugin keeps a duplicate of the handle,
	// so the connection outlives this mounter. Without it a mounter does
	// not hand over (OpHandOver): exiting would end the connection.
	Kept bool `json:"kept,omitempty"`
	// AtSignal, with OpHandOver: hand over at the next SIGTERM rather
	// than now. An upgrade arms the mounter so, then changes its pod's
	// image: kubelet stops the container (SIGTERM) and starts the new
	// image in the same pod, which takes the connection over.
	AtSignal bool `json:"atSignal,omitempty"`
	// CapacityBytes, with OpResize, is the volume's new size.
	CapacityBytes int64 `json:"capacityBytes,omitempty"`
}

// Reply is what the mounter answers.
type Reply struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
	Serving bool   `json:"serving"`
	// Source is the bucket[/prefix] the mounter serves, so that a node
	// plugin can tell a mounter for another volume from the right one.
	Source string `json:"source,omitempty"`
	PID    int    `json:"pid,omitempty"`
	// Health, in answer to OpStatus, is what the mount's users must be
	// told (fusefs.Health); nil when all is well.
	Health *Health `json:"health,omitempty"`
	// Stopping, in answer to OpStatus: the mounter was told to stop
	// (SIGTERM) and serves only until released or its drain timeout.
	Stopping bool `json:"stopping,omitempty"`
	// Resumable, in answer to OpStatus from a mounter not serving: an
	// earlier mounter of this volume saved its connection's state here
	// and the kernel can resend, so the node plugin hands over the
	// connection it kept (OpServe with TakeOver) instead of mounting again.
	Resumable bool `json:"resumable,omitempty"`
	// Mode, from a serving mounter: how the mount survives its mounter
	// (ModeTakeover or ModeRepair).
	Mode string `json:"mode,omitempty"`
	// Lent, in a mounter's answer to OpLend, is the handle to attach
	// (SCM_RIGHTS) and close once sent; 0 attaches nothing, as handles
	// to lend come from DupHandle, never 0, 1 or 2. Not in the JSON: a
	// handle travels beside the answer.
	Lent int `json:"-"`
	// Then, when set, runs once the answer is written (a mounter that
	// handed over exits then).
	Then func() `json:"-"`
}

// Health is fusefs.Health on the wire.
type Health struct {
	// Problem says why S3 refuses the mount's requests now; ProblemKind
	// is one of the Problem* values, for the node plugin's advice.
	Problem      string    `json:"problem,omitempty"`
	ProblemKind  string    `json:"problemKind,omitempty"`
	ProblemSince time.Time `json:"problemSince,omitzero"`
	// LostUploads counts files closed asynchronously that never reached
	// S3; LastLostUpload names the latest and why.
	LostUploads    int64  `json:"lostUploads,omitempty"`
	LastLostUpload string `json:"lastLostUpload,omitempty"`
	// LostFiles are the keys of the latest lost uploads, oldest first.
	LostFiles []string `json:"lostFiles,omitempty"`
	// PendingUploads are files closed asynchronously not uploaded yet
	// (kept in the journal on the mounter's staging volume), PendingBytes
	// their size, PendingFiles some of their keys, sorted.
	PendingUploads int64    `json:"pendingUploads,omitempty"`
	PendingBytes   int64    `json:"pendingBytes,omitempty"`
	PendingFiles   []string `json:"pendingFiles,omitempty"`
	// Conflicts counts changes to files another writer replaced
	// meanwhile, kept under a conflict name; LastConflict names the
	// latest file and where its change is.
	Conflicts    int64  `json:"conflicts,omitempty"`
	LastConflict string `json:"lastConflict,omitempty"`
}

// Kinds of Health.Problem.
const (
	ProblemAccess      = "access"      // credentials or policy refused
	ProblemBucket      = "bucket"      // the bucket does not exist
	ProblemUnavailable = "unavailable" // the endpoint does not answer, or fails requests
)

// ProblemKinds are the kinds of Health.Problem, for a metric's series.
var ProblemKinds = []string{ProblemAccess, ProblemBucket, ProblemUnavailable}

// Call sends req (with fd attached when fd >= 0) to the mounter listening
// at socket and returns its reply. A handle the mounter attaches is
// closed: only CallFD takes one.
func Call(ctx context.Context, socket string, req Request, fd int) (Reply, error) {
	rep, got, err := CallFD(ctx, socket, req, fd)
	if got >= 0 {
		syscall.Close(got)
	}
	return rep, err
}

// Probe asks the mounter at socket whether it is ready: listening, and
// serving if it was handed a handle. For the pod's readiness probe.
func Probe(ctx context.Context, socket string) error {
	_, err := Call(ctx, socket, Request{Op: OpStatus}, -1)
	return err
}

// Handler answers one request; fd is the received FUSE handle or -1.
type Handler func(req Request, fd int) Reply

// Serve accepts connections on l until ctx ends, one request each.
func Serve(ctx context.Context, l *net.UnixListener, h Handler) error {
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		go handle(conn, h)
	}
}

func handle(conn *net.UnixConn, h Handler) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Minute))
	buf := make([]byte, maxRequest)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	fds := receivedFDs(oob[:oobn])
	if len(fds) > 1 {
		closeAll(fds[1:]) // only one handle per request
		fds = fds[:1]
	}
	if err != nil {
		closeAll(fds)
		return
	}
	fd := -1
	if len(fds) == 1 {
		fd = fds[0]
	}
	var rep Reply
	if req, err := parseRequest(buf[:n]); err != nil {
		closeAll(fds) // nothing will serve it
		rep = Reply{Error: err.Error()}
	} else {
		rep = h(req, fd)
	}
	rep.PID = os.Getpid()
	if rep.Then != nil {
		defer rep.Then()
	}
	if rep.Lent > 0 {
		sendLent(conn, rep)
		return
	}
	json.NewEncoder(conn).Encode(rep)
	conn.Close()
}

func closeAll(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}

// Listen creates the socket, replacing a stale one left by a previous
// mounter process, readable only by its owner and root.
func Listen(socket string) (*net.UnixListener, error) {
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("remove stale socket %s: %w", socket, err)
	}
	var l *net.UnixListener
	err := withShortPath(socket, func(path string) (err error) {
		l, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	l.SetUnlinkOnClose(false) // the short name may be gone; a restart replaces the socket
	os.Chmod(socket, 0o600)
	return l, nil
}

// dialSocket connects to the Unix socket at socket, which must be one and
// not a symlink: the socket's directory is the mounter's, and a mounter
// (unprivileged, and maybe not what it seems) must not point the node
// plugin (privileged, handing over a FUSE handle) at another socket of the
// node. The socket is reached through an O_PATH handle on it, which
// also keeps the name short enough for a sockaddr_un.
func dialSocket(ctx context.Context, socket string) (net.Conn, error) {
	fd, err := unix.Open(socket, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: socket, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: socket, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s is not a socket (mode %o): refused", socket, st.Mode)
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}

// maxSocketPath is what fits in a sockaddr_un with its NUL.
const maxSocketPath = 107

// withShortPath calls fn with a name for socket that fits in a
// sockaddr_un. A socket deep in kubelet's pod directories can be longer
// than that; it is then reached through an O_PATH handle on its directory.
func withShortPath(socket string, fn func(path string) error) error {
	if len(socket) <= maxSocketPath {
		return fn(socket)
	}
	dir, err := unix.Open(filepath.Dir(socket), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	return fn(fmt.Sprintf("/proc/self/fd/%d/%s", dir, filepath.Base(socket)))
}
