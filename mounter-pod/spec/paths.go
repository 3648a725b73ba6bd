package spec

import (
	"errors"
	"path/filepath"
	"regexp"
)

// Paths inside the mounter's container.
const (
	SocketDir      = "/run/objfuse"
	SocketPath     = SocketDir + "/mounter.sock"
	CredentialsDir = "/etc/objfuse/credentials"
	StagingDir     = "/var/cache/objfuse"
)

// The mounter pod's volumes, by name: the socket's and the staging
// directory's emptyDirs, and the credentials Secret's.
const (
	socketVolume      = "socket"
	credentialsVolume = "credentials"
	stagingVolume     = "staging"
)

var uidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// SocketOnNode is where, on the node, the socket of the mounter pod with
// this UID is: inside the pod's socket emptyDir, which kubelet keeps
// under its root directory (the node plugin's side of SocketPath). Only a
// well-formed UID is accepted, so the path cannot leave kubeletDir.
func SocketOnNode(kubeletDir, podUID string) (string, error) {
	if !uidRE.MatchString(podUID) {
		return "", errors.New("mounter pod UID " + podUID + " is not a UID")
	}
	return filepath.Join(kubeletDir, "pods", podUID, "volumes", "kubernetes.io~empty-dir", socketVolume, filepath.Base(SocketPath)), nil
}
