package driver

import (
	"context"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.opts.Name, VendorVersion: d.opts.Version}, nil
}

func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	caps := []*csi.PluginCapability{}
	if d.opts.serves(ModeController) {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE},
		}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe is ready when the default S3 endpoint, if one is set, answers.
func (d *Driver) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if d.opts.S3Defaults.Endpoint == "" || !d.opts.serves(ModeController) {
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := d.endpointAnswers(ctx)
	if err != nil {
		d.log.Warn("probe: default S3 endpoint does not answer", "endpoint", d.opts.S3Defaults.Endpoint, "err", err)
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(err == nil)}, nil
}
