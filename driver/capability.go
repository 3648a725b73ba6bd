package driver

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The volume capabilities objfuse serves, which the controller and the
// node both check.

// checkCapabilities accepts filesystem volumes in every access mode.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	for _, c := range caps {
		if err := checkCapability(c); err != nil {
			return err
		}
	}
	return nil
}

func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return status.Error(codes.InvalidArgument, "volume capability is required")
	}
	if c.GetBlock() != nil {
		return status.Error(codes.InvalidArgument, "objfuse volumes are filesystems: volumeMode Block is not supported")
	}
	if c.GetMount() == nil {
		return status.Error(codes.InvalidArgument, "volume capability needs an access type (mount)")
	}
	if fs := c.GetMount().GetFsType(); fs != "" && fs != "fuse.objfuse" && fs != "objfuse" {
		return status.Errorf(codes.InvalidArgument, "fsType %q: objfuse serves only its own filesystem (leave fsType empty)", fs)
	}
	if c.GetAccessMode() == nil || c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN {
		return status.Error(codes.InvalidArgument, "volume capability needs an access mode")
	}
	return nil
}

func readOnlyMode(c *csi.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true
	}
	return false
}
