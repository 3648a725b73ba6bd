package driver

import (
	"context"

	"github.com/objfuse/objfuse/mounter-pod/launcher"
)

// SyncCredentials runs one pass of the controller's credentials sync.
func SyncCredentials(ctx context.Context, d *Driver) (int, error) {
	return d.syncCredentials(ctx, d.opts.Launcher.(*launcher.Kube))
}
