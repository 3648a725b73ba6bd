// Package spec describes a mounter: the objfuse-mount command line that
// serves one volume on one node, and the Kubernetes pod and Secret that
// run it. It is pure: building a spec talks to nothing.
package spec

import (
	"strconv"

	"github.com/objfuse/objfuse/volume"
)

// Mounter is one volume served on one node.
type Mounter struct {
	VolumeID string
	NodeID   string
	Volume   volume.Volume
	ReadOnly bool
	// ForPod is, for an inline volume, the pod that declared it
	// ("namespace/name/uid"): the mounter lives as long as that pod.
	ForPod string
}

// MounterIn is the mounter of a volume on a node whose pods run in
// namespace ("" for the driver's), for finding and stopping it where the
// rest of its volume is not known.
func MounterIn(volumeID, nodeID, namespace string) Mounter {
	return Mounter{VolumeID: volumeID, NodeID: nodeID, Volume: volume.Volume{Mounter: volume.MounterResources{Namespace: namespace}}}
}

// NamespaceOr is the namespace m's pods run in: its volume's
// (volume.ParamMounterNamespace), else driverNamespace.
func (m Mounter) NamespaceOr(driverNamespace string) string {
	if ns := m.Volume.Mounter.Namespace; ns != "" {
		return ns
	}
	return driverNamespace
}

// Key names the mounter: a hash of volume and node, safe in paths and pod names.
func (m Mounter) Key() string { return volume.Key(m.VolumeID, m.NodeID) }

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
	if m.ReadOnly {
		args = append(args, "--read-only")
	}
	// Files without owner metadata are root's in a mounter pod (the
	// pod's fsGroup gives group access), not its unprivileged user's.
	o := volume.MountOptions{volume.ParamUID: "0", volume.ParamGID: "0"}
	for k, val := range v.Mount {
		o[k] = val
	}
	args = append(args, o.Args()...)
	return append(args, v.Source())
}
