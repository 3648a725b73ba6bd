package driver

import (
	"context"
	"fmt"
	"path/filepath"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registrar answers kubelet's plugin watcher, so the driver needs no
// node-driver-registrar sidecar.
type registrar struct {
	name, endpoint string
	d              *Driver
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.PluginRegistered {
		r.d.log.Info("registered with kubelet")
	} else {
		r.d.log.Error("kubelet refused registration", "err", s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// RegisterWithKubelet serves the registration socket in
// <kubelet-dir>/plugins_registry until ctx ends. csiSocket is the CSI
// endpoint's path as kubelet sees it.
func (d *Driver) RegisterWithKubelet(ctx context.Context, csiSocket string) error {
	path := filepath.Join(d.opts.KubeletDir, "plugins_registry", d.opts.Name+"-reg.sock")
	l, err := Listen(path)
	if err != nil {
		return fmt.Errorf("registration socket: %w", err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &registrar{name: d.opts.Name, endpoint: csiSocket, d: d})
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	go srv.Serve(l)
	return nil
}
