// objfuse-csi serves objfuse's CSI services: the controller (buckets and
// mounter pods) or the node (FUSE mounts and their repair), or both.
//
//	objfuse-csi --mode=controller --endpoint=unix:///csi/csi.sock --namespace=objfuse-system --mounter-config=/etc/objfuse/mounter.yaml
//	objfuse-csi --mode=node --endpoint=unix:///var/lib/kubelet/plugins/objfuse.csi.io/csi.sock --node-id=$(NODE_NAME) --mounter-config=/etc/objfuse/mounter.yaml
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/objfuse/objfuse/driver"
	"github.com/objfuse/objfuse/mounter-pod/lifecycle"
	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

type flags struct {
	opts          driver.Options
	endpoint      string
	healthAddr    string
	namespace     string
	mounterConfig string
	kubeconfig    string
	register      bool
	logFormat     string
	showVersion   bool
}

func parse(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fl := flag.NewFlagSet("objfuse-csi", flag.ContinueOnError)
	fl.SetOutput(stderr)
	o := &f.opts
	mode := fl.String("mode", "", "services to serve: controller, node or all")
	fl.StringVar(&f.endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint (unix:///path)")
	fl.StringVar(&o.Name, "driver-name", driver.DefaultName, "CSI driver name")
	fl.StringVar(&o.NodeID, "node-id", "", "this node's name (node mode)")
	fl.StringVar(&o.KubeletDir, "kubelet-dir", "/var/lib/kubelet", "kubelet's root directory (node mode)")
	fl.StringVar(&o.StateDir, "state-dir", "/var/lib/objfuse", "where FUSE mountpoints and volume state live (node mode)")
	fl.DurationVar(&o.ReconcileEvery, "reconcile-interval", 5*time.Second, "how often the node checks its mounts")
	fl.BoolVar(&o.MountTakeover, "mount-takeover", true, "keep each volume's FUSE connection so that it outlives its mounter and a restarted mounter takes it over (node mode); false: a mounter's death ends the connection and the node mounts the volume again")
	fl.StringVar(&f.healthAddr, "health-addr", "", "serve /healthz and /metrics on this host:port")
	fl.StringVar(&f.namespace, "namespace", "objfuse-system", "namespace of mounter pods and their Secrets")
	pvcNamespaces := fl.String("pvc-namespaces", "", "comma-separated namespaces where volumes whose StorageClass says mounterNamespace: pvc may run their mounter pods (in their PVC's namespace); the driver needs rights there (the chart's mounter.pvcNamespaces)")
	fl.StringVar(&o.InlineAllowFile, "inline-allow", "/etc/objfuse/inline-allow.yaml", "allow-list of inline volumes: which namespaces' pods may declare which buckets (a YAML list of namespace, endpoint, bucket and prefix); a missing file allows none")
	fl.StringVar(&f.mounterConfig, "mounter-config", "/etc/objfuse/mounter.yaml", "mounter pod template: the controller builds mounter pods from it; the node upgrades running mounters to its image")
	fl.StringVar(&o.S3Defaults.Endpoint, "s3-endpoint", "", "default S3 endpoint for StorageClasses that name none; with --s3-credentials-dir it enables ListVolumes and Probe")
	fl.StringVar(&o.S3Defaults.Region, "s3-region", "", "default S3 region")
	fl.BoolVar(&o.S3Defaults.PathStyle, "s3-path-style", false, "default to path-style S3 requests")
	fl.StringVar(&o.DefaultCredentialsDir, "s3-credentials-dir", "", "directory with accessKeyID and secretAccessKey for the default endpoint")
	fl.BoolVar(&o.DefaultCredentialsForVolumes, "s3-credentials-for-volumes", false, "let volumes whose StorageClass or PV names no Secret use --s3-credentials-dir (every such volume gets the driver's own keys)")
	fl.StringVar(&o.CABundle, "ca-bundle", "", "PEM file of extra CA certificates to trust for S3")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster when running in a pod)")
	fl.BoolVar(&f.register, "register", true, "register with kubelet through <kubelet-dir>/plugins_registry (node mode)")
	fl.StringVar(&f.logFormat, "log-format", "json", "log format: json or text")
	fl.BoolVar(&f.showVersion, "version", false, "print the version and exit")
	err := fl.Parse(args)
	if err != nil {
		return nil, err
	}
	if f.showVersion {
		return f, nil
	}
	if fl.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fl.Args())
	}
	o.PVCNamespaces, err = lifecycle.ParseNamespaces(*pvcNamespaces, f.namespace)
	if err != nil {
		return nil, fmt.Errorf("--pvc-namespaces: %w", err)
	}
	o.Mode = driver.Mode(*mode)
	switch o.Mode {
	case driver.ModeController, driver.ModeNode, driver.ModeAll:
	default:
		return nil, fmt.Errorf("--mode %q: want controller, node or all", *mode)
	}
	if o.DefaultCredentialsForVolumes && o.DefaultCredentialsDir == "" {
		return nil, errors.New("--s3-credentials-for-volumes needs --s3-credentials-dir: the credentials it lets volumes use")
	}
	if o.S3Defaults.Endpoint != "" {
		if _, err := volume.ParseParams(nil, o.S3Defaults); err != nil {
			return nil, fmt.Errorf("--s3-endpoint: %w", err)
		}
	}
	o.Version = version
	return f, nil
}

func run(args []string, stderr io.Writer) int {
	f, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "objfuse-csi: %v\n", err)
		return 2
	}
	if f.showVersion {
		fmt.Println("objfuse-csi", version)
		return 0
	}
	var h slog.Handler = slog.NewJSONHandler(stderr, nil)
	if f.logFormat == "text" {
		h = slog.NewTextHandler(stderr, nil)
	}
	log := slog.New(h)
	f.opts.Logger = log
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, f, log); err != nil {
		fmt.Fprintf(stderr, "objfuse-csi: %v\n", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, f *flags, log *slog.Logger) error {
	o := &f.opts
	kc, err := kubeClient(f.kubeconfig)
	if err != nil {
		return err
	}
	o.KubeClient = kc
	o.Namespace = f.namespace
	tmpl, err := mounterTemplate(f.mounterConfig)
	if o.Mode == driver.ModeNode && errors.Is(err, fs.ErrNotExist) {
		// A node plugin deployed without the template: running
		// mounters keep their image.
		log.Warn("no mounter template: running mounters are not upgraded", "mounter-config", f.mounterConfig)
		err = nil
	}
	if err != nil {
		return err
	}
	o.MounterImage = tmpl.Image
	if o.Mode != driver.ModeNode {
		if kc == nil {
			return errors.New("the controller launches mounter pods: run it in a pod or pass --kubeconfig")
		}
		o.Launcher = lifecycle.NewKube(lifecycle.Config{
			Client: kc, Namespace: f.namespace, PVCNamespaces: o.PVCNamespaces, Template: tmpl, Logger: log,
			Driver: o.Name, Volumes: o.S3Defaults, Credentials: o.Credentials(), InlineAllowFile: o.InlineAllowFile,
		})
	}
	d, err := driver.New(*o)
	if err != nil {
		return err
	}
	if f.healthAddr != "" {
		if err := d.ServeHealth(ctx, f.healthAddr); err != nil {
			return fmt.Errorf("health: %w", err)
		}
	}
	if o.Mode != driver.ModeController && f.register {
		if _, err := os.Stat(o.KubeletDir + "/plugins_registry"); err == nil {
			if err := d.RegisterWithKubelet(ctx, socketPath(f.endpoint)); err != nil {
				return err
			}
		} else {
			log.Warn("not registering with kubelet: no plugins_registry directory", "kubelet-dir", o.KubeletDir)
		}
	}
	return d.Serve(ctx, f.endpoint)
}

// mounterTemplate reads the mounter pod template at path.
func mounterTemplate(path string) (spec.Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return spec.Template{}, fmt.Errorf("mounter config: %w", err)
	}
	return spec.ParseTemplate(data)
}

func socketPath(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && u.Scheme == "unix" {
		return u.Path
	}
	return endpoint
}

// kubeClient connects to the cluster, or returns nil outside one.
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	switch {
	case kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		cfg, err = rest.InClusterConfig()
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}
