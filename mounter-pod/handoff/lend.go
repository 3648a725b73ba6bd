package handoff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// CallFD is Call, and also returns the handle the mounter attached to its
// answer (OpLend), or -1: the caller's to close, and to check (a mounter
// is not trusted to attach what it says). At most one handle is taken;
// more, or a handle with an answer that is not OK, are closed and the
// call fails.
func CallFD(ctx context.Context, socket string, req Request, fd int) (Reply, int, error) {
	conn, err := dialSocket(ctx, socket)
	if err != nil {
		return Reply{}, -1, fmt.Errorf("connect to mounter at %s: %w", socket, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	uc := conn.(*net.UnixConn)
	body, _ := json.Marshal(req)
	var oob []byte
	if fd >= 0 {
		oob = syscall.UnixRights(fd)
	}
	if _, _, err := uc.WriteMsgUnix(body, oob, nil); err != nil {
		return Reply{}, -1, fmt.Errorf("send %s to mounter: %w", req.Op, err)
	}
	uc.CloseWrite()
	rep, fds, err := readReplyWithHandles(uc)
	if err == nil && len(fds) > 1 {
		err = fmt.Errorf("%d handles attached, at most 1 expected", len(fds))
	}
	if err == nil && len(fds) == 1 && !rep.OK {
		err = errors.New("a handle attached to a refusal")
	}
	if err != nil {
		closeAll(fds)
		return Reply{}, -1, fmt.Errorf("read mounter's answer to %s: %w", req.Op, err)
	}
	if !rep.OK {
		return rep, -1, fmt.Errorf("mounter refused %s: %s", req.Op, rep.Error)
	}
	if len(fds) == 0 {
		return rep, -1, nil
	}
	return rep, fds[0], nil
}

// readReplyWithHandles is readReply, with the handles that came with the
// answer (each the caller's to close, also when it fails).
func readReplyWithHandles(uc *net.UnixConn) (Reply, []int, error) {
	var fds []int
	var all []byte
	buf := make([]byte, 16<<10)
	// Room for a few handles: a mounter attaching more than one is told
	// off, which needs them received (and closed) rather than truncated.
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
		// A failed read (a timeout: a mounter that does not answer) may
		// say -1 for its counts.
		fds = append(fds, receivedFDs(oob[:max(oobn, 0)])...)
		all = append(all, buf[:max(n, 0)]...)
		switch {
		case flags&unix.MSG_CTRUNC != 0:
			return Reply{}, fds, errors.New("more handles attached than expected")
		case len(all) > maxReply:
			return Reply{}, fds, fmt.Errorf("an answer of more than %d bytes", maxReply)
		case errors.Is(err, io.EOF):
			rep, err := parseReply(all)
			return rep, fds, err
		case err != nil:
			return Reply{}, fds, err
		}
	}
}

// sendLent writes rep with its handle rep.Lent attached, and closes the
// handle: it is the receiver's now.
func sendLent(conn *net.UnixConn, rep Reply) {
	defer syscall.Close(rep.Lent)
	body, _ := json.Marshal(rep)
	n, _, err := conn.WriteMsgUnix(body, syscall.UnixRights(rep.Lent), nil)
	if err == nil && n < len(body) {
		conn.Write(body[n:]) // the handle went with the first part
	}
}

// DupHandle duplicates fd for lending (close-on-exec, and never 0, 1 or
// 2, which Reply.Lent reads as nothing attached).
func DupHandle(fd int) (int, error) {
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
}
