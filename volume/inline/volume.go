package inline

import (
	"crypto/sha256"
	"fmt"

	"github.com/objfuse/objfuse/volume"
)

// CtxEphemeral is the key kubelet sets to "true" in the volume context of
// an inline ephemeral volume's NodePublishVolume (with the CSIDriver's
// podInfoOnMount, over anything the pod's attributes say).
const CtxEphemeral = "csi.storage.k8s.io/ephemeral"

// Handle is the volume id kubelet gives the inline volume named volumeName
// in the pod of podUID (k8s.io/kubernetes pkg/volume/csi, makeVolumeHandle):
// the controller, which reads the pod, finds the mounter the node asks
// for by the same id.
func Handle(podUID, volumeName string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(podUID+volumeName)))
}

// tenantOnly are the parameters a pod may not set on its own volume: they
// choose where the driver runs pods and how large, which is the admin's
// (the mounter template's) to say.
var tenantOnly = []string{volume.ParamMounterNamespace, volume.ParamMounterMemoryLimit, volume.ParamMounterCPURequest}

// Volume reads an inline volume from the attributes a pod gives it: a
// bucket and optionally a prefix, endpoint, region and mount options, as
// in a static PersistentVolume's volumeAttributes.
// The driver's defaults (objfuse-csi --s3-endpoint) do not apply: the
// node, which checks the allow-list too, does not know them.
func Volume(volumeID string, attrs map[string]string) (volume.Volume, error) {
	for _, k := range []string{volume.ParamBucket, volume.ParamEndpoint} {
		if attrs[k] == "" {
			return volume.Volume{}, &volume.ParseError{Param: k, Reason: "an inline objfuse volume names its endpoint and bucket in volumeAttributes (and optionally a prefix)"}
		}
	}
	for _, k := range tenantOnly {
		if v, ok := attrs[k]; ok {
			return volume.Volume{}, &volume.ParseError{Param: k, Value: v, Reason: "an inline volume's mounter runs as the driver's admin set it: use a PVC whose StorageClass says this"}
		}
	}
	return volume.FromContext(volumeID, attrs, volume.Defaults{})
}
