package driver

import (
	"context"
	"log/slog"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// identityServer serves the CSI Identity service: who the driver is,
// whether it serves the controller, and whether it is ready.
type identityServer struct {
	csi.UnimplementedIdentityServer
	name, version string
	controller    bool      // the controller is served too
	s3            *s3Admins // Probe's reach to the default endpoint
	log           *slog.Logger
}

var _ csi.IdentityServer = (*identityServer)(nil)

func (s *identityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: s.name, VendorVersion: s.version}, nil
}

func (s *identityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	// Expansion is online: a mounter takes a new size while it serves.
	caps := []*csi.PluginCapability{{Type: &csi.PluginCapability_VolumeExpansion_{
		VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE},
	}}}
	if s.controller {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE},
		}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe is ready when the default S3 endpoint, if one is set, answers.
func (s *identityServer) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if s.s3.defaults.Endpoint == "" || !s.controller {
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := s.s3.endpointAnswers(ctx)
	if err != nil {
		s.log.Warn("probe: default S3 endpoint does not answer", "endpoint", s.s3.defaults.Endpoint, "err", err)
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(err == nil)}, nil
}
