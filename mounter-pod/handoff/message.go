package handoff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"syscall"
)

// The two ends trust each other little: the node plugin is privileged and
// the mounter is not, so each reads what the other sends as it would
// untrusted input, bounded in size and checked before use.
const (
	// maxRequest is the most a request may take: one read of a socket.
	maxRequest = 4096
	// maxReply bounds a mounter's answer, which the node plugin reads
	// and turns into Events and metrics.
	maxReply = 64 << 10
)

// ops are the requests a mounter knows.
var ops = []string{OpServe, OpStatus, OpExit, OpLend, OpHandOver, OpResize}

// parseRequest reads one request as a mounter receives it.
func parseRequest(body []byte) (Request, error) {
	var req Request
	if len(body) >= maxRequest {
		return req, fmt.Errorf("a request takes less than %d bytes", maxRequest)
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return req, fmt.Errorf("bad request: %w", err)
	}
	if !slices.Contains(ops, req.Op) {
		return req, fmt.Errorf("unknown op %q: this mounter knows %q", req.Op, ops)
	}
	return req, nil
}

// receivedFDs are the descriptors SCM_RIGHTS messages in oob carried:
// each is the receiver's to close.
func receivedFDs(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if len(m.Data)%4 != 0 {
			continue // ParseUnixRights would index past its end (found by FuzzReceivedFDs)
		}
		if got, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

// readReply reads a mounter's answer, at most maxReply bytes of it.
func readReply(r io.Reader) (Reply, error) {
	var rep Reply
	body, err := io.ReadAll(io.LimitReader(r, maxReply+1))
	if err != nil {
		return rep, err
	}
	if len(body) > maxReply {
		return rep, fmt.Errorf("an answer of more than %d bytes", maxReply)
	}
	return parseReply(body)
}

// parseReply reads the answer body, of at most maxReply bytes.
func parseReply(body []byte) (Reply, error) {
	var rep Reply
	if len(bytes.TrimSpace(body)) == 0 {
		return rep, errors.New("no answer (the mounter closed the connection)")
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}
