// Command bench compares objfuse with the peer FUSE-over-S3 filesystems
// available here (s3fs, rclone mount) and with a raw minio-go client, all
// on one MinIO it starts itself, the way /work/shared/PEERS.md measured
// them: writes timed until complete in S3, cold reads after a remount and
// drop_caches, daemon CPU from /proc/PID/stat, peak RSS from VmHWM.
//
//	go run ./test/bench                        # 1 GiB, 3 rounds
//	go run ./test/bench -size 256MiB -rounds 1 # quick
//	go run ./test/bench -profile /tmp/prof     # also profile objfuse
//
// It needs root and /dev/fuse, MinIO (see test/miniotest), and for the
// peers `apt-get install s3fs rclone` (or -install); a missing peer is
// skipped with a note. Every figure is the median of the rounds, which run
// interleaved: each row runs for every filesystem, in an order that
// rotates from round to round, before the next row.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/objfuse/objfuse/test/miniotest"
)

const seqKey = "data/seq.bin"

func lsDir(n int) string    { return fmt.Sprintf("ls%d", n) }
func lsKey(n, i int) string { return fmt.Sprintf("ls%d/f%05d", n, i) }

// env is what every row needs: the server, the bucket and the settings.
type env struct {
	endpoint   string
	credsDir   string
	s3fsPasswd string
	rcloneConf string
	bucket     string
	prefix     string // every key the mounts see is under it ("" or "dir/")
	proxy      *counter
	work       string
	client     *minio.Client
	pattern    []byte

	size      int64
	files     int
	randReads int
	stats     int
	lsSizes   []int
	// The data loader row's files: how many, and the size of each.
	loaderFiles int
	loaderSize  int64
}

// key is the object key of a path relative to the mounts' root.
func (e *env) key(rel string) string {
	if e.prefix == "" || rel == "" {
		return e.prefix + rel
	}
	return e.prefix + "/" + rel
}

// source names what the filesystems mount: the bucket, joined to the
// prefix with sep ("/" for objfuse and rclone, ":/" for s3fs).
func (e *env) source(sep string) string {
	if e.prefix == "" {
		return e.bucket
	}
	return e.bucket + sep + e.prefix
}

func main() {
	os.Exit(run())
}

func run() (code int) {
	var (
		sizeFlag    = flag.String("size", "1GiB", "size of the sequential write and read files (e.g. 256MiB, 1GiB)")
		rounds      = flag.Int("rounds", 3, "interleaved rounds; each figure is their median")
		files       = flag.Int("files", 1000, "4 KiB files the create row makes")
		randReads   = flag.Int("rand-reads", 200, "random 4 KiB reads after a cold mount")
		stats       = flag.Int("stats", 1000, "never-listed files the stat row stats")
		loaderFiles = flag.Int("loader-files", 10000, "files the data loader row reads")
		loaderSize  = flag.String("loader-size", "100KiB", "size of each file the data loader row reads")
		lsFlag      = flag.String("ls", "1000,10000", "sizes of the directories `ls -l` lists")
		only        = flag.String("fs", "objfuse,objfuse-async,objfuse-wb,objfuse-lowmem,objfuse-cache,s3fs,rclone-off,rclone-full,geesefs", "filesystems to measure (raw minio-go always runs)")
		rowsFlag    = flag.String("rows", strings.Join(rowOrder, ","), "rows to run")
		objfuseBin  = flag.String("objfuse-bin", "", "prebuilt objfuse-mount (default: go build ./cmd/objfuse-mount)")
		install     = flag.Bool("install", false, "apt-get install s3fs and rclone if missing")
		jsonOut     = flag.String("json", "", "also write every round's figures to this JSON file")
		profDir     = flag.String("profile", "", "after the rounds, CPU-profile each objfuse variant measured through its pprof endpoint for each row and write the profiles and their tops here")
		profSecs    = flag.Int("profile-seconds", 15, "length of each CPU profile")
		prefix      = flag.String("prefix", "", "mount this key prefix of the bucket rather than its root")
		countReqs   = flag.Bool("count-requests", false, "send the filesystems' S3 traffic through a counting proxy and print the requests of each row (adds a hop: figures are not comparable with runs without it)")
		objfuseArgs = flag.String("objfuse-args", "", "extra objfuse-mount flags, comma-separated (e.g. --concurrency=8), for experiments")
		objfuseEnv  = flag.String("objfuse-env", "", "extra environment for objfuse-mount only, comma-separated (e.g. GOMAXPROCS=1,GOGC=200), for experiments")
		keep        = flag.Bool("keep", false, "keep the work directory (MinIO data, caches)")
	)
	flag.Parse()
	if reexecWithoutPreemptionSignals() {
		return 1 // only if the exec failed
	}
	size, err := parseSize(*sizeFlag)
	if err != nil || size < 16<<20 {
		fmt.Fprintf(os.Stderr, "bench: -size %q: want at least 16MiB (%v)\n", *sizeFlag, err)
		return 2
	}
	if *files < 1 || *files > 99999 {
		// Names are f%05d: past that they stop sorting as they are made.
		fmt.Fprintf(os.Stderr, "bench: -files %d: want 1 to 99999\n", *files)
		return 2
	}
	e := &env{prefix: strings.Trim(*prefix, "/"), size: size, files: *files, randReads: *randReads, stats: *stats, loaderFiles: *loaderFiles}
	if e.loaderSize, err = parseSize(*loaderSize); err != nil || e.loaderSize < 1 || *loaderFiles < 1 || *loaderFiles > 99999 {
		fmt.Fprintf(os.Stderr, "bench: -loader-files %d -loader-size %q: want 1 to 99999 files of a size such as 100KiB (%v)\n", *loaderFiles, *loaderSize, err)
		return 2
	}
	for _, s := range strings.Split(*lsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 99999 {
			fmt.Fprintf(os.Stderr, "bench: -ls %q: want counts below 100000\n", *lsFlag)
			return 2
		}
		e.lsSizes = append(e.lsSizes, n)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: needs root (mounts, drop_caches)")
		return 2
	}

	// Whatever happens, stop what we started: on return, on a panic and
	// on SIGINT/SIGTERM.
	var srv *miniotest.Server
	var stopOnce sync.Once
	stopAll := func() {
		stopOnce.Do(func() {
			cleanup(e.work)
			if srv != nil {
				srv.Close()
			}
			if e.work != "" && !*keep {
				os.RemoveAll(e.work)
			}
		})
	}
	defer stopAll()
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "bench: panic: %v\n", p)
			code = 1
		}
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "bench: %v: cleaning up\n", s)
		stopAll()
		os.Exit(130)
	}()

	if e.work, err = os.MkdirTemp("", "objfuse-bench-"); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	if *install {
		installPeers()
	}
	bin := *objfuseBin
	if bin == "" {
		bin = filepath.Join(e.work, "objfuse-mount")
		logf("building objfuse-mount")
		if err := buildObjfuse(bin); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
	}
	var vs []*variant
	want := map[string]bool{}
	for _, n := range strings.Split(*only, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var notes []string
	for _, v := range variants(bin) {
		if !want[v.name] {
			continue
		}
		if p, err := exec.LookPath(v.bin); err != nil {
			notes = append(notes, fmt.Sprintf("%s skipped: %s is not installed (apt-get install %s, or run with -install)", v.name, v.bin, v.bin))
			continue
		} else {
			v.bin = p
		}
		if v.objfuse && *objfuseArgs != "" {
			base, extra := v.args, strings.Split(*objfuseArgs, ",")
			v.args = func(e *env, bucket, mnt, cacheDir, metricsAddr string) []string {
				a := base(e, bucket, mnt, cacheDir, metricsAddr)
				// Flags go before the two positional arguments.
				n := len(a) - 2
				return append(append(append([]string{}, a[:n]...), extra...), a[n:]...)
			}
		}
		if v.objfuse && *objfuseEnv != "" {
			extra := strings.Split(*objfuseEnv, ",")
			v.environ = func(e *env, base []string) []string { return append(base, extra...) }
		}
		vs = append(vs, v)
	}
	rows := map[string]bool{}
	for _, r := range strings.Split(*rowsFlag, ",") {
		rows[strings.TrimSpace(r)] = true
	}

	logf("starting MinIO")
	if srv = miniotest.StartShared(); srv == nil {
		fmt.Fprintln(os.Stderr, "bench: MinIO did not start (see test/miniotest for how to install it)")
		return 1
	}
	if *countReqs {
		c, err := startCounter(srv.Endpoint)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer c.close()
		e.proxy = c
	}
	if err := e.setup(srv); err != nil {
		fmt.Fprintln(os.Stderr, "bench: setup:", err)
		return 1
	}

	res := results{}
	reqs := reqLog{}
	for round := range *rounds {
		for _, row := range rowOrder {
			if !rows[row] {
				continue
			}
			// The raw client goes first, last or in between as the
			// order rotates, like every filesystem.
			order := append([]*variant{nil}, vs...)
			k := round % len(order)
			order = append(order[k:], order[:k]...)
			for _, v := range order {
				name := rawName
				var got map[string]float64
				var err error
				t0 := time.Now()
				if v == nil {
					got, err = rawRows[row](e, round)
				} else {
					if !v.runs(row) {
						continue
					}
					name = v.name
					if e.proxy != nil {
						e.proxy.take()
					}
					got, err = fsRows[row](e, v, round)
					if e.proxy != nil {
						reqs.add(row, name, e.proxy.take())
					}
				}
				res.add(name, got)
				if err != nil {
					msg := fmt.Sprintf("round %d, %s, %s: %v", round+1, row, name, err)
					logf("ERROR %s", msg)
					notes = append(notes, msg)
				} else {
					logf("round %d %-6s %-13s %s (%.1fs)", round+1, row, name, fmtMap(got), time.Since(t0).Seconds())
				}
			}
		}
	}

	cfg := fmt.Sprintf("MinIO %s on 127.0.0.1 (single drive), -size %s, -rounds %d, -files %d, -rand-reads %d, -stats %d, -ls %s, -loader-files %d, -loader-size %s",
		minioVersion(), humanSize(e.size), *rounds, e.files, e.randReads, e.stats, *lsFlag, e.loaderFiles, humanSize(e.loaderSize))
	if n := settleNote(); n != "" {
		notes = append(notes, n)
	}
	printTable(os.Stdout, e, res, vs, cfg, notes)
	printTargets(os.Stdout, e, res)
	if e.proxy != nil {
		var names []string
		for _, v := range vs {
			names = append(names, v.name)
		}
		reqs.print(os.Stdout, names)
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"config": cfg, "rounds": res}, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}
	if *profDir != "" {
		for _, v := range vs {
			if v.objfuse {
				if err := e.profile(v, *profDir, *profSecs, rows); err != nil {
					fmt.Fprintln(os.Stderr, "bench: profile:", err)
					return 1
				}
			}
		}
	}
	return 0
}

// setup makes the bucket and what the rows read: the sequential-read
// object and the listing directories (with s3fs-style directory markers,
// which every filesystem here understands).
func (e *env) setup(srv *miniotest.Server) error {
	e.endpoint = srv.Endpoint
	if e.proxy != nil {
		e.endpoint = "http://" + e.proxy.addr
	}
	e.credsDir = srv.CredsDir
	e.bucket = "bench"
	e.s3fsPasswd = filepath.Join(e.work, "s3fs-passwd")
	if err := os.WriteFile(e.s3fsPasswd, []byte(miniotest.AccessKey+":"+miniotest.SecretKey+"\n"), 0o600); err != nil {
		return err
	}
	e.rcloneConf = filepath.Join(e.work, "rclone.conf")
	conf := fmt.Sprintf("[bench]\ntype = s3\nprovider = Minio\nenv_auth = false\naccess_key_id = %s\nsecret_access_key = %s\nendpoint = %s\nregion = us-east-1\nno_check_bucket = true\n",
		miniotest.AccessKey, miniotest.SecretKey, e.endpoint)
	if err := os.WriteFile(e.rcloneConf, []byte(conf), 0o600); err != nil {
		return err
	}
	c, err := minio.New(srv.Addr, &minio.Options{Creds: credentials.NewStaticV4(miniotest.AccessKey, miniotest.SecretKey, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return err
	}
	e.client = c
	ctx := context.Background()
	if err := c.MakeBucket(ctx, e.bucket, minio.MakeBucketOptions{}); err != nil {
		return err
	}
	e.pattern = make([]byte, 16<<20)
	rand.Read(e.pattern)
	logf("uploading %s for the read rows", humanSize(e.size))
	dirs := append([]string{"data", loaderDir}, lsDirs(e.lsSizes)...)
	if e.prefix != "" {
		dirs = append([]string{""}, dirs...)
	}
	for _, d := range dirs {
		if _, err := c.PutObject(ctx, e.bucket, e.key(d)+"/", strings.NewReader(""), 0, minio.PutObjectOptions{}); err != nil {
			return err
		}
	}
	if _, err := c.PutObject(ctx, e.bucket, e.key(seqKey), &patternReader{pattern: e.pattern, size: e.size}, e.size, minio.PutObjectOptions{}); err != nil {
		return err
	}
	for _, n := range e.lsSizes {
		logf("uploading %d objects to %s/", n, lsDir(n))
		if err := e.putMany(n, lsKey, nil); err != nil {
			return err
		}
	}
	logf("uploading %d objects of %s to %s/", e.loaderFiles, humanSize(e.loaderSize), loaderDir)
	body := e.pattern[:e.loaderSize]
	return e.putMany(e.loaderFiles, func(_, i int) string { return loaderKey(i) }, body)
}

func lsDirs(ns []int) []string {
	var out []string
	for _, n := range ns {
		out = append(out, lsDir(n))
	}
	return out
}

// putMany puts n objects named key(n, i), each holding body (or a
// short text when body is nil), 16 at a time.
func (e *env) putMany(n int, key func(n, i int) string, body []byte) error {
	if body == nil {
		body = []byte("objfuse bench\n")
	}
	keys := make(chan string)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				if _, err := e.client.PutObject(context.Background(), e.bucket, e.key(k), bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		keys <- key(n, i)
	}
	close(keys)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// reexecWithoutPreemptionSignals restarts this program with Go's
// asynchronous preemption off, unless GODEBUG already says how it wants
// it. The harness is the workload: with preemption on, the runtime's
// SIGURGs land on threads blocked in FUSE calls, the kernel turns them
// into FUSE_INTERRUPT, and objfuse (as of this writing) cancels the S3
// request and fails the call with EIO (on close(2): the file is lost).
// cp, dd and ls get no such signals. GODEBUG=asyncpreemptoff=0 shows it.
func reexecWithoutPreemptionSignals() bool {
	g := os.Getenv("GODEBUG")
	if strings.Contains(g, "asyncpreemptoff") {
		return false
	}
	if g != "" {
		g += ","
	}
	self, err := os.Executable()
	if err != nil {
		return false
	}
	err = syscall.Exec(self, os.Args, append(os.Environ(), "GODEBUG="+g+"asyncpreemptoff=1"))
	fmt.Fprintln(os.Stderr, "bench: re-exec with GODEBUG=asyncpreemptoff=1:", err)
	return true
}

// buildObjfuse builds cmd/objfuse-mount of the module this runs in.
func buildObjfuse(out string) error {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return fmt.Errorf("go list -m: %w", err)
	}
	cmd := exec.Command("go", "build", "-o", out, "./cmd/objfuse-mount")
	cmd.Dir = strings.TrimSpace(string(root))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/objfuse-mount: %w", err)
	}
	return nil
}

func installPeers() {
	var missing []string
	for _, b := range []string{"s3fs", "rclone"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return
	}
	logf("apt-get install %s", strings.Join(missing, " "))
	upd := exec.Command("apt-get", "update", "-qq")
	upd.Stdout, upd.Stderr = os.Stderr, os.Stderr
	upd.Run()
	cmd := exec.Command("apt-get", append([]string{"install", "-y", "-qq"}, missing...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		logf("apt-get install failed: %v", err)
	}
}

func minioVersion() string {
	bin, err := miniotest.Binary()
	if err != nil {
		return "?"
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(out))
	if len(f) >= 3 {
		return f[2]
	}
	return "?"
}

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			f, err := strconv.ParseFloat(strings.TrimSuffix(s, u.suffix), 64)
			return int64(f * float64(u.mult)), err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

func humanSize(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d B", n)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func fmtMap(m map[string]float64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s=%.4g", k, m[k]))
	}
	return strings.Join(parts, " ")
}
