package volume

import (
	"fmt"
	"strconv"
)

// Volume is everything a node and a mounter need: where the data is and
// how to mount it.
type Volume struct {
	ID
	Mount   MountOptions
	Mounter MounterResources
}

// Context renders v as a CSI volume context (what CreateVolume returns and
// what a static PV's volumeAttributes hold).
func (v Volume) Context() map[string]string {
	ctx := v.Mount.Map()
	ctx[ParamEndpoint] = v.S3.Endpoint
	ctx[ParamRegion] = v.S3.Region
	ctx[ParamPathStyle] = strconv.FormatBool(v.S3.PathStyle)
	ctx[ParamBucket] = v.Bucket
	if v.Prefix != "" {
		ctx[ParamPrefix] = v.Prefix
	}
	if v.Mounter.MemoryLimit != "" {
		ctx[ParamMounterMemoryLimit] = v.Mounter.MemoryLimit
	}
	if v.Mounter.CPURequest != "" {
		ctx[ParamMounterCPURequest] = v.Mounter.CPURequest
	}
	if v.Mounter.Namespace != "" {
		ctx[ParamMounterNamespace] = v.Mounter.Namespace
	}
	return ctx
}

// FromContext resolves a volume from its id and context. A context naming
// a bucket (a static PV, or any volume this driver made) is the source of
// truth; otherwise the id must be one of ours.
func FromContext(volumeID string, ctx map[string]string, def Defaults) (Volume, error) {
	if ctx[ParamBucket] == "" {
		id, err := ParseID(volumeID)
		if err != nil {
			return Volume{}, fmt.Errorf("%v, and its volume attributes name no %q", err, ParamBucket)
		}
		// Keep the mount options the context may still carry.
		m, err := ParseMountOptions(ctx)
		if err != nil {
			return Volume{}, err
		}
		return Volume{ID: id, Mount: m}, nil
	}
	// In a context, "bucket" and "prefix" are the volume's own; parse them
	// as a StorageClass would, then take the prefix as-is.
	p, err := ParseParams(ctx, def)
	if err != nil {
		return Volume{}, err
	}
	if ns := p.Mounter.Namespace; ns == MounterNamespacePVC || ns == MounterNamespaceDriver {
		return Volume{}, &ParseError{Param: ParamMounterNamespace, Value: ns,
			Reason: "in a volume's attributes it names the namespace the mounters run in; " + MounterNamespacePVC + " and " + MounterNamespaceDriver + " are a StorageClass's values (leave it out for the driver's namespace)"}
	}
	return Volume{ID: ID{S3: p.S3, Bucket: p.SharedBucket, Prefix: p.BasePrefix}, Mount: p.Mount, Mounter: p.Mounter}, nil
}
