// Package lifecycle is the controller side of a mounter's life: it
// launches the mounter pod of a (volume, node) pair, stops it, and keeps
// it right afterwards with periodic passes (Kube.Run): a pod no
// VolumeAttachment accounts for is collected (orphans.go), an attached
// volume whose pod is gone gets a new one (relaunch.go), and rotated
// credentials reach running mounters (credsync.go). The CSI controller
// calls only Launcher; the node plugin uses Finder to find a mounter pod
// that replaced the one it was given.
package lifecycle

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// Launcher runs mounters. In a cluster a mounter is a pod (Kube); the
// test harness runs it as a process. Either way the node plugin gets a
// Unix socket under the kubelet directory that the mounter serves.
type Launcher interface {
	// Launch starts the mounter for m, or finds it already running, and
	// waits until it runs (a pod: until its container started; the node
	// waits for the socket itself). creds are the files of its
	// credentials directory. It returns the mounter's pod UID.
	Launch(ctx context.Context, m spec.Mounter, creds map[string][]byte) (podUID string, err error)
	// Stop removes m's mounter and what was made for it; a mounter that
	// does not exist is not an error.
	Stop(ctx context.Context, m spec.Mounter) error
	// NodeExists says whether a node of this id can run mounters.
	NodeExists(ctx context.Context, nodeID string) (bool, error)
	// Run keeps the launched mounters right until ctx ends.
	Run(ctx context.Context)
	// The launcher's metrics, served beside the driver's.
	prometheus.Collector
}

// Reasons a launch fails, wrapped with the mounter's own words.
var (
	// ErrFailed: the mounter exited with an error (bad credentials, a
	// missing bucket, an unreachable endpoint) or cannot start (image).
	ErrFailed = errors.New("mounter failed")
	// ErrNotReady: the mounter did not start in time (Pending).
	ErrNotReady = errors.New("mounter not ready")
	// ErrIncompatible: a mounter for the same volume and node runs with
	// other options (read-only or not).
	ErrIncompatible = errors.New("volume already published to this node with other options")
)
