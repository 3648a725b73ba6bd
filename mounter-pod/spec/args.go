// Package spec describes a mounter: the objfuse-mount command line that
// serves one volume on one node, and the Kubernetes pod and Secret that
// run it. It is pure: building a spec talks to nothing.
package spec

import (
	"fmt"
	"strconv"

	"github.com/objfuse/objfuse/volume"
)

// Mounter is one volume served on one node.
type Mounter struct {
	VolumeID string
	NodeID   string
	Volume   volume.Volume
	ReadOnly bool
}

// Key names the mounter: a hash of volume and node, safe in paths and pod names.
func (m Mounter) Key() string { return volume.Key(m.VolumeID, m.NodeID) }

// Paths inside the mounter's container.
const (
	SocketDir      = "/run/objfuse"
	SocketPath     = SocketDir + "/mounter.sock"
	CredentialsDir = "/etc/objfuse/credentials"
	StagingDir     = "/var/cache/objfuse"
)

// Args is the objfuse-mount command line for m, given where its socket,
// credentials and staging directory are. It never holds a secret.
func (m Mounter) Args(socket, credentialsDir, stagingDir string) []string {
	v := m.Volume
	args := []string{
		"--handoff=" + socket,
		"--endpoint=" + v.S3.Endpoint,
		"--region=" + v.S3.Region,
		"--path-style=" + strconv.FormatBool(v.S3.PathStyle),
		"--credentials-dir=" + credentialsDir,
		"--staging-dir=" + stagingDir,
		"--log-format=json",
	}
	o := v.Mount
	if m.ReadOnly {
		args = append(args, "--read-only")
	}
	if o.UID != nil {
		args = append(args, fmt.Sprintf("--uid=%d", *o.UID))
	} else {
		args = append(args, "--uid=0")
	}
	if o.GID != nil {
		args = append(args, fmt.Sprintf("--gid=%d", *o.GID))
	} else {
		args = append(args, "--gid=0")
	}
	if o.FileMode != "" {
		args = append(args, "--file-mode="+o.FileMode)
	}
	if o.DirMode != "" {
		args = append(args, "--dir-mode="+o.DirMode)
	}
	if o.StatTTL != 0 {
		args = append(args, "--stat-ttl="+o.StatTTL.String())
	}
	if o.ListTTL != 0 {
		args = append(args, "--list-ttl="+o.ListTTL.String())
	}
	if o.AsyncClose {
		args = append(args, "--async-close")
	}
	if o.NoBatching {
		args = append(args, "--no-batching")
	}
	if o.PartSizeMiB != 0 {
		args = append(args, fmt.Sprintf("--part-size-mib=%d", o.PartSizeMiB))
	}
	if o.Concurrency != 0 {
		args = append(args, fmt.Sprintf("--concurrency=%d", o.Concurrency))
	}
	if o.MemoryLimitMiB != 0 {
		args = append(args, fmt.Sprintf("--memory-limit-mib=%d", o.MemoryLimitMiB))
	}
	if o.ReadCacheMiB != 0 {
		// In the staging emptyDir, the mounter's only writable disk.
		args = append(args, fmt.Sprintf("--read-cache-mib=%d", o.ReadCacheMiB))
	}
	return append(args, v.Source())
}
