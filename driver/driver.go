// Package driver serves objfuse's CSI Identity, Controller and Node
// services. The controller makes buckets (or prefixes) and starts a
// mounter per (volume, node) through a launcher; the node mounts
// /dev/fuse, hands the handle to that mounter and bind-mounts the result
// into pods, and repairs mounts whose mounter died.
package driver

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"

	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
	"github.com/objfuse/objfuse/volume"
)

// DefaultName is the CSI driver name.
const DefaultName = "objfuse.csi.io"

// Mode says which services a driver process serves.
type Mode string

const (
	ModeController Mode = "controller"
	ModeNode       Mode = "node"
	ModeAll        Mode = "all" // both, for csi-sanity and single-machine use
)

// Options configure a driver.
type Options struct {
	Name    string
	Version string
	Mode    Mode
	// NodeID is this node's name (node mode).
	NodeID string

	// Defaults for StorageClasses that leave them out; with
	// DefaultCredentialsDir they also let ListVolumes and Probe reach S3.
	S3Defaults            volume.Defaults
	DefaultCredentialsDir string
	// DefaultCredentialsForVolumes lets a request that carries no secrets
	// (a StorageClass or PV without a Secret) use DefaultCredentialsDir:
	// an admin's explicit choice, as every such volume then gets the
	// driver's own keys. Off, such a request is refused.
	DefaultCredentialsForVolumes bool
	CABundle                     string

	// Launcher starts and stops mounters, and keeps them right while the
	// controller serves (controller mode).
	Launcher lifecycle.Launcher
	// KubeClient, when set, lets the node emit Events on pods and find a
	// mounter pod that replaced the one it was given.
	KubeClient kubernetes.Interface
	// Namespace is where mounter pods run.
	Namespace string
	// PVCNamespaces are where else they may: the namespaces of PVCs
	// whose StorageClass says mounterNamespace: pvc (controller mode).
	PVCNamespaces []string

	// KubeletDir is kubelet's root directory; mounter sockets live in pod
	// directories under it (node mode).
	KubeletDir string
	// StateDir holds FUSE mountpoints and per-volume state (node mode).
	StateDir string
	// Mounts makes the node's mounts and reads them (default
	// mounts.System, the system calls; tests may give a mounts.Fake).
	Mounts mounts.Mounter
	// Events, when set, receives the node's Events for pods instead of
	// the API (KubeClient) or the log.
	Events EventSink
	// ReconcileEvery is how often the node checks its mounts; 0 means 5s.
	ReconcileEvery time.Duration
	// ProbeTimeout bounds a check of a FUSE mount; 0 means 2s.
	ProbeTimeout time.Duration
	// MounterWait bounds NodeStage's wait for the mounter's socket; 0 means 60s.
	MounterWait time.Duration
	// MountTakeover keeps a handle of each staged volume's FUSE
	// connection in the node plugin, so that the connection outlives its
	// mounter and a restarted mounter that can resume it takes it over
	// (pods see a pause). Off, a mounter's death ends the connection and
	// the node mounts the volume again (node_reconcile.go).
	MountTakeover bool
	// MounterImage is the image mounters run (the mounter template's):
	// the node upgrades the running mounters of its volumes to it, in
	// place and one at a time (node_upgrade.go). "" leaves them be.
	MounterImage string
	// InlineAllowFile is the allow-list of inline volumes (inline.Rules):
	// the node refuses to mount one that it does not allow. "" allows none.
	InlineAllowFile string

	Logger *slog.Logger
}

// Driver is the CSI plugin: an identity server, and the controller and
// node servers its mode asks for, over one gRPC endpoint.
type Driver struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics

	identity   *identityServer
	controller *controllerServer // nil unless the controller is served
	node       *nodeServer       // nil unless the node is served
}

// New checks opts and returns a driver.
func New(opts Options) (*Driver, error) {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ReconcileEvery == 0 {
		opts.ReconcileEvery = 5 * time.Second
	}
	if opts.Mounts == nil {
		opts.Mounts = mounts.System{}
	}
	if opts.ProbeTimeout == 0 {
		opts.ProbeTimeout = 2 * time.Second
	}
	if opts.MounterWait == 0 {
		opts.MounterWait = 60 * time.Second
	}
	if opts.CABundle != "" {
		// Checked here, where its name can be told: later it is merged
		// into each volume's credentials.
		pem, err := os.ReadFile(opts.CABundle)
		if err != nil {
			return nil, fmt.Errorf("--ca-bundle: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-bundle %s holds no PEM certificates", opts.CABundle)
		}
	}
	switch opts.Mode {
	case ModeController, ModeNode, ModeAll:
	default:
		return nil, fmt.Errorf("mode %q: want controller, node or all", opts.Mode)
	}
	if opts.serves(ModeController) && opts.Launcher == nil {
		return nil, errors.New("controller mode needs a mounter launcher")
	}
	if opts.serves(ModeNode) {
		if opts.NodeID == "" {
			return nil, errors.New("node mode needs --node-id")
		}
		if opts.KubeletDir == "" || opts.StateDir == "" {
			return nil, errors.New("node mode needs --kubelet-dir and --state-dir")
		}
	}
	d := &Driver{opts: opts, log: opts.Logger, metrics: newMetrics()}
	s3 := &s3Admins{defaults: opts.S3Defaults, creds: opts.Credentials()}
	d.identity = &identityServer{name: opts.Name, version: opts.Version, controller: opts.serves(ModeController), s3: s3, log: d.log}
	if opts.serves(ModeController) {
		d.controller = &controllerServer{s3: s3, launcher: opts.Launcher, log: d.log,
			namespaces: lifecycle.Namespaces{Driver: opts.Namespace, PVC: opts.PVCNamespaces}}
		d.metrics.reg.MustRegister(opts.Launcher)
	}
	if opts.serves(ModeNode) {
		d.node = d.newNodeServer()
	}
	return d, nil
}

func (o Options) serves(m Mode) bool { return o.Mode == m || o.Mode == ModeAll }

// newNodeServer is the node server of d's options.
func (d *Driver) newNodeServer() *nodeServer {
	o := d.opts
	n := &nodeServer{
		nodeID: o.NodeID, kubeletDir: o.KubeletDir, mounts: o.Mounts,
		state:   newNodeState(o.StateDir, d.metrics.abnormal, d.metrics.survival, d.log),
		repairs: d.metrics.repairs, takeovers: d.metrics.takeovers, takeoverFallbacks: d.metrics.takeoverFallbacks, log: d.log,
		probeTimeout: o.ProbeTimeout, mounterWait: o.MounterWait, reconcileEvery: o.ReconcileEvery,
		watches: newMounterWatches(), inlineAllow: o.InlineAllowFile,
	}
	if o.MountTakeover {
		n.keeper = newConnKeeper(o.Mounts.Connection)
	}
	if o.KubeClient != nil {
		n.finder = &lifecycle.Finder{Client: o.KubeClient, Namespace: o.Namespace}
		if o.MounterImage != "" {
			n.upgrades = &mounterUpgrades{want: o.MounterImage, pods: n.finder, counts: d.metrics.upgrades, notes: map[string]upgradeNote{}}
		}
	}
	switch {
	case o.Events != nil:
		n.events = o.Events
	case o.KubeClient != nil:
		n.events = &kubeEvents{recorder: newRecorder(o.KubeClient, o.Name, o.NodeID), podsAt: n.state.podsAt, log: d.log}
	default:
		n.events = logEvents{d.log}
	}
	return n
}

// Credentials are where the driver's mounters and S3 requests get their
// keys, as the options say.
func (o Options) Credentials() lifecycle.Credentials {
	return lifecycle.Credentials{DefaultDir: o.DefaultCredentialsDir, DefaultForVolumes: o.DefaultCredentialsForVolumes, CABundle: o.CABundle}
}

// Serve serves CSI on endpoint ("unix:///path" or a path) until ctx ends,
// with the node's reconcile loop and the launcher's upkeep of mounters.
func (d *Driver) Serve(ctx context.Context, endpoint string) error {
	l, err := Listen(endpoint)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.intercept))
	csi.RegisterIdentityServer(srv, d.identity)
	if d.controller != nil {
		csi.RegisterControllerServer(srv, d.controller)
		go d.controller.launcher.Run(ctx)
	}
	if d.node != nil {
		csi.RegisterNodeServer(srv, d.node)
		if err := os.MkdirAll(d.node.state.volumesDir(), 0o700); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		loop := make(chan struct{})
		go func() { defer close(loop); d.node.reconcileLoop(ctx) }()
		// Stopping, the loop may finish a mounter's upgrade first.
		defer func() {
			if ctx.Err() != nil {
				<-loop
			}
		}()
	}
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	d.log.Info("serving CSI", "endpoint", endpoint, "mode", d.opts.Mode, "name", d.opts.Name, "version", d.opts.Version)
	return srv.Serve(l)
}

// Listen opens a CSI endpoint, replacing a stale socket.
func Listen(endpoint string) (net.Listener, error) {
	path := endpoint
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil || u.Scheme != "unix" {
			return nil, fmt.Errorf("endpoint %q: want unix:///path/to/csi.sock", endpoint)
		}
		path = u.Path
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", endpoint, err)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l, nil
}
