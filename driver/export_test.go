package driver

import (
	"context"

	"github.com/objfuse/objfuse/mounter-pod/launcher"
)

// StartCache fills the controller's cluster cache, as Serve does before
// its loops start.
func StartCache(ctx context.Context, d *Driver) error {
	return d.startCache(ctx, d.opts.Launcher.(*launcher.Kube))
}

// SyncCredentials runs one pass of the controller's credentials sync.
func SyncCredentials(ctx context.Context, d *Driver) (int, error) {
	return d.syncCredentials(ctx, d.opts.Launcher.(*launcher.Kube))
}

// RelaunchMissing runs one pass of the controller's mounter check.
func RelaunchMissing(ctx context.Context, d *Driver) (int, error) {
	return d.relaunchMissing(ctx, d.opts.Launcher.(*launcher.Kube))
}

// CollectOrphans runs one pass of the controller's orphan collection.
func CollectOrphans(ctx context.Context, d *Driver) {
	d.collectOrphans(ctx, d.opts.Launcher.(*launcher.Kube))
}
