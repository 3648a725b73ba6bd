// Package sanity runs the CSI conformance suite (csi-sanity) against the
// real driver: controller and node in one process, a real MinIO, real
// FUSE mounts served by objfuse-mount processes running as nobody.
package sanity

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/objfuse/objfuse/test/csitest"
)

func TestSanity(t *testing.T) {
	env := csitest.Start(t, csitest.Options{})
	cfg := sanity.NewTestConfig()
	cfg.Address = env.Endpoint
	cfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(lateReady{insecure.NewCredentials()})}
	cfg.TargetPath = env.Dir + "/target"
	cfg.StagingPath = env.Dir + "/staging"
	cfg.SecretsFile = env.SecretsFile
	cfg.TestVolumeParameters = map[string]string{}
	cfg.IdempotentCount = 2
	sanity.Test(t, cfg)
}

// lateReady delays the connection's handshake. csi-test's Connect waits
// for the connection's state to change from the state it reads first;
// over a local socket the connection can be Ready before that first read,
// and Connect then waits a minute and fails. The delay is the time Connect
// has between dialing and that read: seconds, not the 50 ms that a loaded
// machine can take (a connection or two per run: cheap).
type lateReady struct {
	credentials.TransportCredentials
}

func (l lateReady) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	select {
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-time.After(2 * time.Second):
	}
	return l.TransportCredentials.ClientHandshake(ctx, authority, conn)
}
