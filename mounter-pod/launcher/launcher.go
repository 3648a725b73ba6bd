// Package launcher starts and stops mounters. In a cluster a mounter is a
// pod (Kube); on a single machine, for tests and demos, it is a supervised
// process (Process). Both give the node plugin the same thing: a Unix
// socket at a path under the kubelet directory that the mounter serves.
package launcher

import (
	"context"
	"errors"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// Launcher runs mounters.
type Launcher interface {
	// Launch starts the mounter for m, or finds it already running, and
	// waits until it is ready. creds are the files of its credentials
	// directory. It returns the mounter's pod UID.
	Launch(ctx context.Context, m spec.Mounter, creds map[string][]byte) (podUID string, err error)
	// Stop removes m's mounter and what was made for it; a mounter that
	// does not exist is not an error.
	Stop(ctx context.Context, m spec.Mounter) error
	// NodeExists says whether a node of this id can run mounters.
	NodeExists(ctx context.Context, nodeID string) (bool, error)
}

// Reasons a launch fails, wrapped with the mounter's own words.
var (
	// ErrFailed: the mounter exited with an error (bad credentials, a
	// missing bucket, an unreachable endpoint) or cannot start (image).
	ErrFailed = errors.New("mounter failed")
	// ErrNotReady: the mounter did not become ready in time (Pending).
	ErrNotReady = errors.New("mounter not ready")
	// ErrIncompatible: a mounter for the same volume and node runs with
	// other options (read-only or not).
	ErrIncompatible = errors.New("volume already published to this node with other options")
)
