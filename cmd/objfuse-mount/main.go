// objfuse-mount serves an S3 bucket (or a prefix of one) as a directory
// through FUSE. By hand, like s3fs:
//
//	objfuse-mount [flags] BUCKET[/PREFIX] MOUNTPOINT
//
// In a mounter pod it serves a FUSE handle the node plugin hands over:
//
//	objfuse-mount --handoff SOCKET [flags] BUCKET[/PREFIX]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/offheap"
	"github.com/objfuse/objfuse/mounter-pod/handoff"
	"github.com/objfuse/objfuse/mounter-pod/mounts"
	"github.com/objfuse/objfuse/mounter-pod/serve"
	"github.com/objfuse/objfuse/volume"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// readyFDEnv names the pipe a backgrounded child reports its start on.
const readyFDEnv = "OBJFUSE_READY_FD"

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

type options struct {
	cfg        serve.Config
	mountpoint string
	handoff    string
	probe      string
	handOver   string
	foreground bool
	logFormat  string
	verbose    bool
	version    bool
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fl := flag.NewFlagSet("objfuse-mount", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprint(stderr, `Usage:
  objfuse-mount [flags] BUCKET[/PREFIX] MOUNTPOINT
  objfuse-mount --handoff SOCKET [flags] BUCKET[/PREFIX]
  objfuse-mount --probe SOCKET
  objfuse-mount --hand-over SOCKET

Serves an S3 bucket, or the keys under PREFIX in it, as a directory.
Credentials come from --credentials-dir (files accessKeyID,
secretAccessKey and optionally sessionToken) or from the AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN environment variables.
Before mounting it checks the endpoint, the credentials and the bucket,
and exits 1 with the reason if any is wrong. On SIGINT or SIGTERM it
uploads pending writes (for up to --drain-timeout), unmounts and exits 0.

Flags:
`)
		fl.PrintDefaults()
	}
	c := &o.cfg
	defEndpoint := os.Getenv("AWS_ENDPOINT_URL")
	if defEndpoint == "" {
		defEndpoint = "https://s3.amazonaws.com"
	}
	defRegion := os.Getenv("AWS_REGION")
	if defRegion == "" {
		defRegion = "us-east-1"
	}
	fl.StringVar(&c.S3.Endpoint, "endpoint", defEndpoint, "S3 endpoint URL (default from $AWS_ENDPOINT_URL)")
	fl.StringVar(&c.S3.Region, "region", defRegion, "S3 region (default from $AWS_REGION)")
	fl.BoolVar(&c.S3.PathStyle, "path-style", false, "use path-style requests (MinIO and most self-hosted S3)")
	fl.StringVar(&c.S3.CABundle, "ca-bundle", "", "PEM file of extra CA certificates to trust")
	fl.StringVar(&c.S3.CredentialsDir, "credentials-dir", "", "directory with accessKeyID and secretAccessKey files")
	fl.BoolVar(&c.FS.ReadOnly, "read-only", false, "mount read-only")
	mount := volume.MountOptions{}
	for _, opt := range volume.MountOptionTable {
		usage := opt.Usage
		if opt.Kind == volume.Whole {
			usage += fmt.Sprintf(" (%d..%d)", opt.Min, opt.Max)
		}
		fl.Var(mountFlag{opt, mount}, opt.Flag, usage)
	}
	fl.StringVar(&c.FS.StagingDir, "staging-dir", os.TempDir(), "directory for local copies of randomly written files")
	stagingMiB := fl.Int64("staging-limit-mib", fusefs.DefaultStagingLimit>>20, "bound on the staging directory's use, in MiB")
	fl.IntVar(&c.FS.MaxInodes, "max-inodes", fusefs.DefaultMaxInodes, "files and directories the mount keeps track of at most (about 1 KiB each); past it, those the kernel has not used longest are handed back to it to forget")
	fl.StringVar(&c.FS.ReadCacheDir, "read-cache-dir", "", "directory for the read cache's files (default: the staging directory)")
	fl.BoolVar(&c.FS.NoSplice, "no-splice", false, "keep readahead in memory buffers instead of splicing plain-HTTP response bodies through pipes")
	fl.IntVar(&c.ReadaheadKiB, "readahead-kib", mounts.ReadaheadKiB, "kernel readahead of the mount in KiB, set when mounting as root (Linux gives FUSE 128)")
	fl.BoolVar(&c.ExitWhenReleased, "exit-when-released", false, "with --handoff: exit 0 once the node plugin releases the mount (an inline volume's mounter, whose pod is done), instead of waiting for it to be staged again")
	fl.DurationVar(&c.DrainTimeout, "drain-timeout", serve.DefaultDrainTimeout, "after SIGTERM or SIGINT, how long pending uploads may take; what is not uploaded by then is reported lost (a mounter pod gets its grace period less 10 s)")
	fl.StringVar(&c.MetricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this host:port (and /debug/pprof/ when it is a loopback address)")
	fl.BoolVar(&o.foreground, "foreground", false, "stay in the foreground (default: detach once mounted)")
	fl.StringVar(&o.handoff, "handoff", "", "serve a FUSE handle received on this Unix socket (mounter pod mode)")
	fl.StringVar(&o.handOver, "hand-over", "", "tell the mounter at this socket to hand its FUSE connection over at its next SIGTERM, to the container that replaces it (an upgrade: then change the mounter pod's image)")
	fl.StringVar(&o.probe, "probe", "", "exit 0 if the mounter at this socket is ready (readiness probe)")
	fl.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fl.BoolVar(&o.verbose, "v", false, "verbose logging")
	fl.BoolVar(&o.version, "version", false, "print the version and exit")
	if err := fl.Parse(args); err != nil {
		return nil, err
	}
	if o.version || o.probe != "" || o.handOver != "" {
		return o, nil
	}
	want := 2
	if o.handoff != "" {
		want = 1
	}
	if fl.NArg() != want {
		fl.Usage()
		return nil, fmt.Errorf("want %d arguments, got %d: %s", want, fl.NArg(), strings.Join(fl.Args(), " "))
	}
	var err error
	if c.Bucket, c.Prefix, err = serve.ParseSource(fl.Arg(0)); err != nil {
		return nil, err
	}
	if o.handoff == "" {
		o.mountpoint = fl.Arg(1)
	}
	if c.DrainTimeout <= 0 {
		return nil, fmt.Errorf("--drain-timeout %v: want a positive duration such as 50s", c.DrainTimeout)
	}
	if c.ReadaheadKiB < 4 || c.ReadaheadKiB > 64<<10 {
		return nil, fmt.Errorf("--readahead-kib %d: want 4 to 65536", c.ReadaheadKiB)
	}
	takeMountOptions(c, mount)
	if o.handoff != "" && c.Takeover && c.FS.WritebackCache {
		// As a StorageClass is refused (volume.ParseMountOptions).
		return nil, errors.New("--writeback-cache with --handoff needs --no-takeover: a successor cannot take over a connection whose kernel keeps its own file sizes")
	}
	c.FS.StagingLimit = *stagingMiB << 20
	set := map[string]bool{}
	fl.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["staging-limit-mib"] && !set["read-cache-mib"] {
		// A mounter pod made before the read cache was on by default:
		// its staging limit is all its emptyDir leaves, with no room
		// for a cache (kubelet would evict the pod past that bound).
		c.FS.ReadCacheSize = 0
	}
	c.S3.PartSize = uint64(c.FS.PartSize)
	c.S3.Concurrency = uint(c.FS.Concurrency)
	if err := c.FS.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	if o.mountpoint != "" {
		if st, err := os.Stat(o.mountpoint); err != nil {
			return nil, fmt.Errorf("mountpoint: %w", err)
		} else if !st.IsDir() {
			return nil, fmt.Errorf("mountpoint %s is not a directory", o.mountpoint)
		}
	}
	return o, nil
}

func run(args []string, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "objfuse-mount: %v\n", err)
		return 2
	}
	if o.version {
		fmt.Fprintln(os.Stdout, "objfuse-mount", version)
		return 0
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	var h slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	if o.logFormat == "json" {
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	}
	o.cfg.Logger = slog.New(h)
	if total := processMemory(o.cfg.FS.MemoryLimit); total > 0 {
		// Let the GC work harder before the process outgrows its buffers
		// plus a margin for the runtime, FUSE requests and HTTP. Part
		// buffers are mapped outside the Go heap: the runtime's limit
		// is what they leave.
		offheap.Within(total)
	}
	ctx := context.Background()

	switch {
	case o.probe != "":
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := handoff.Probe(pctx, o.probe); err != nil {
			fmt.Fprintf(stderr, "objfuse-mount: not ready: %v\n", err)
			return 1
		}
		return 0
	case o.handOver != "":
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := handoff.Call(hctx, o.handOver, handoff.Request{Op: handoff.OpHandOver, AtSignal: true}, -1); err != nil {
			fmt.Fprintf(stderr, "objfuse-mount: %v\n", err)
			return 1
		}
		fmt.Fprintln(os.Stdout, "armed: the next SIGTERM hands the connection over")
		return 0
	case o.handoff != "":
		if err := serve.Handoff(ctx, o.cfg, o.handoff); err != nil {
			fmt.Fprintf(stderr, "objfuse-mount: %v\n", err)
			return 1
		}
		return 0
	case !o.foreground && os.Getenv(readyFDEnv) == "":
		return detach(args, stderr)
	}
	report := func(error) {}
	if fd := os.Getenv(readyFDEnv); fd != "" {
		n, _ := strconv.Atoi(fd)
		pipe := os.NewFile(uintptr(n), "ready")
		report = func(err error) {
			if err != nil {
				fmt.Fprintln(pipe, err)
			} else {
				fmt.Fprintln(pipe, "ok")
			}
			pipe.Close()
		}
	}
	if err := serve.Mount(ctx, o.cfg, o.mountpoint, report); err != nil {
		fmt.Fprintf(stderr, "objfuse-mount: %v\n", err)
		return 1
	}
	return 0
}

// detach re-runs objfuse-mount in a new session and returns once it has
// mounted (0) or failed (1, with its reason), as s3fs does.
func detach(args []string, stderr io.Writer) int {
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(stderr, "objfuse-mount: %v\n", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "objfuse-mount: %v\n", err)
		return 1
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), readyFDEnv+"=3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	devnull, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, devnull, devnull
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "objfuse-mount: %v\n", err)
		return 1
	}
	w.Close()
	msg, _ := io.ReadAll(r)
	line := strings.TrimSpace(string(msg))
	if line == "ok" {
		return 0
	}
	if line == "" {
		line = "the background process exited before mounting"
	}
	fmt.Fprintf(stderr, "objfuse-mount: %s\n", line)
	return 1
}
