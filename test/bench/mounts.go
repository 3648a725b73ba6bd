package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/objfuse/objfuse/test/miniotest"
)

// variant is one filesystem under test: how to start it over a bucket.
type variant struct {
	name string
	// bin is the program it needs; a variant whose bin is missing is skipped.
	bin string
	// only limits the variant to these rows (nil: every row).
	only map[string]bool
	// args builds the command line; cacheDir is the variant's own cache
	// directory (wiped for a cold mount), metricsAddr is set when profiling.
	args func(e *env, bucket, mnt, cacheDir, metricsAddr string) []string
	// environ adjusts the child's environment.
	environ func(e *env, base []string) []string
	objfuse bool
}

func (v *variant) runs(row string) bool { return v.only == nil || v.only[row] }

// readCacheFlag is the objfuse-cache variant's read cache: room for every
// random read of the rand row.
const readCacheFlag = "--read-cache-mib 1024"

// lowMemoryFlag is the objfuse-lowmem variant's memory budget: three 5
// MiB parts (S3's smallest) and a MiB beside them, the least budget that
// keeps two parts going up while the next fills: what the 1 GiB copy's
// RSS target asks the budget to cost.
const lowMemoryFlag = "--memory-limit-mib 16 --part-size-mib 5"

// lowMemoryGoLimit is the objfuse-lowmem variant's GOMEMLIMIT: the
// budget and the runtime's share, as a mounter pod's limit gives it.
const lowMemoryGoLimit = "36MiB"

// writebackFlag is the objfuse-wb variant's: the kernel gathers small
// writes.
const writebackFlag = "--writeback-cache"

func variants(objfuseBin string) []*variant {
	objfuseArgs := func(extra ...string) func(e *env, bucket, mnt, cacheDir, metricsAddr string) []string {
		return func(e *env, bucket, mnt, cacheDir, metricsAddr string) []string {
			a := []string{"--foreground", "--endpoint", e.endpoint, "--path-style", "--credentials-dir", e.credsDir,
				"--staging-dir", cacheDir}
			if metricsAddr != "" {
				a = append(a, "--metrics-addr", metricsAddr)
			}
			a = append(a, extra...)
			return append(a, e.source("/"), mnt)
		}
	}
	rclone := func(mode string) func(e *env, bucket, mnt, cacheDir, metricsAddr string) []string {
		return func(e *env, bucket, mnt, cacheDir, metricsAddr string) []string {
			return []string{"mount", "bench:" + e.source("/"), mnt, "--config", e.rcloneConf,
				"--vfs-cache-mode", mode, "--cache-dir", cacheDir, "--log-level", "ERROR"}
		}
	}
	// rclone refuses to start with AWS_CA_BUNDLE set on this machine
	// (PEERS.md); this is what `env -u AWS_CA_BUNDLE rclone ...` does.
	noCABundle := func(e *env, base []string) []string {
		var out []string
		for _, kv := range base {
			if !strings.HasPrefix(kv, "AWS_CA_BUNDLE=") {
				out = append(out, kv)
			}
		}
		return out
	}
	return []*variant{
		{name: "objfuse", bin: objfuseBin, objfuse: true, args: objfuseArgs()},
		{name: "objfuse-async", bin: objfuseBin, objfuse: true, args: objfuseArgs("--async-close"),
			only: map[string]bool{"create": true}},
		{name: "objfuse-wb", bin: objfuseBin, objfuse: true, args: objfuseArgs(writebackFlag),
			only: map[string]bool{"write": true, "smallwrite": true}},
		{name: "objfuse-lowmem", bin: objfuseBin, objfuse: true, args: objfuseArgs(strings.Fields(lowMemoryFlag)...),
			only: map[string]bool{"write": true}, environ: func(e *env, base []string) []string {
				return append(base, "GOMEMLIMIT="+lowMemoryGoLimit)
			}},
		{name: "objfuse-cache", bin: objfuseBin, objfuse: true, args: objfuseArgs(strings.Fields(readCacheFlag)...),
			only: map[string]bool{"rand": true}},
		{name: "s3fs", bin: "s3fs", args: func(e *env, bucket, mnt, cacheDir, metricsAddr string) []string {
			return []string{e.source(":/"), mnt, "-f", "-o", "url=" + e.endpoint, "-o", "use_path_request_style",
				"-o", "passwd_file=" + e.s3fsPasswd, "-o", "dbglevel=err"}
		}},
		{name: "rclone-off", bin: "rclone", args: rclone("off"), environ: noCABundle},
		{name: "rclone-full", bin: "rclone", args: rclone("full"), environ: noCABundle},
		// geesefs, k8s-csi-s3's filesystem, with its defaults (README
		// says how to build it; the harness uses it when it is in PATH).
		{name: "geesefs", bin: "geesefs", args: func(e *env, bucket, mnt, cacheDir, metricsAddr string) []string {
			return []string{"-f", "--endpoint", e.endpoint, "--region", "us-east-1", e.source(":"), mnt}
		}, environ: func(e *env, base []string) []string {
			return append(noCABundle(e, base), "AWS_ACCESS_KEY_ID="+miniotest.AccessKey, "AWS_SECRET_ACCESS_KEY="+miniotest.SecretKey)
		}},
	}
}

// mount is one running filesystem daemon, started by this harness.
type mount struct {
	v        *variant
	dir      string
	cmd      *exec.Cmd
	pid      int
	exited   chan struct{}
	stderr   *bytes.Buffer
	cacheDir string
	metrics  string
}

var (
	liveMu   sync.Mutex
	live     = map[*mount]bool{}
	stopping bool // set by cleanup: no new daemons from then on
)

// startMount starts v over bucket at a new mount point and waits until the
// kernel shows the mount. cold wipes the variant's cache and drops the
// kernel's page, dentry and inode caches first.
func (e *env) startMount(v *variant, cold bool, withMetrics bool) (*mount, error) {
	if e.proxy != nil {
		// A row's requests are those of its work, not of mounting.
		e.proxy.pause(true)
		defer e.proxy.pause(false)
	}
	cacheDir := filepath.Join(e.work, "cache-"+v.name)
	if cold {
		os.RemoveAll(cacheDir)
		dropCaches()
	}
	os.MkdirAll(cacheDir, 0o700)
	mnt := filepath.Join(e.work, "mnt-"+v.name)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	if isMounted(mnt) {
		lazyUnmount(mnt)
	}
	m := &mount{v: v, dir: mnt, cacheDir: cacheDir, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	if withMetrics {
		m.metrics = freeAddr()
	}
	cmd := exec.Command(v.bin, v.args(e, e.bucket, mnt, cacheDir, m.metrics)...)
	cmd.Env = os.Environ()
	if v.environ != nil {
		cmd.Env = v.environ(e, cmd.Env)
	}
	cmd.Stdout = m.stderr
	cmd.Stderr = m.stderr
	// Die with the harness if it is killed; cleanup() unmounts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := m.start(cmd); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for !isMounted(mnt) {
		select {
		case <-m.exited:
			m.stop()
			return nil, fmt.Errorf("%s exited before mounting: %s", v.name, tail(m.stderr.String()))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("%s not mounted after 30s: %s", v.name, tail(m.stderr.String()))
		}
	}
	// A mount shows in mountinfo a moment before the daemon answers, and
	// objfuse serves its metrics (and pprof) a moment after.
	for time.Now().Before(deadline) {
		if _, err := os.Stat(mnt); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for m.metrics != "" && time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", m.metrics); err == nil {
			c.Close()
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return m, nil
}

// start starts the daemon and records it for cleanup, unless cleanup has
// begun.
func (m *mount) start(cmd *exec.Cmd) error {
	liveMu.Lock()
	defer liveMu.Unlock()
	if stopping {
		return errStopping
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", m.v.name, err)
	}
	m.cmd, m.pid = cmd, cmd.Process.Pid
	go func() { cmd.Wait(); close(m.exited) }()
	live[m] = true
	return nil
}

// stop asks the daemon to unmount and exit (SIGTERM: objfuse uploads what
// is pending first), then makes sure: lazy unmount and SIGKILL.
func (m *mount) stop() {
	if m == nil {
		return
	}
	liveMu.Lock()
	delete(live, m)
	liveMu.Unlock()
	syscall.Kill(m.pid, syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(90 * time.Second):
		fmt.Fprintf(os.Stderr, "bench: %s (pid %d) did not exit after SIGTERM; killing it\n", m.v.name, m.pid)
		lazyUnmount(m.dir)
		syscall.Kill(m.pid, syscall.SIGKILL)
		<-m.exited
	}
	if isMounted(m.dir) {
		lazyUnmount(m.dir)
	}
}

var errStopping = errors.New("cleaning up: no new mounts")

// cleanup stops every daemon this harness started and still runs, and
// makes sure nothing stays mounted under work (so that removing work
// never walks into a mount).
func cleanup(work string) {
	liveMu.Lock()
	stopping = true
	ms := make([]*mount, 0, len(live))
	for m := range live {
		ms = append(ms, m)
	}
	liveMu.Unlock()
	for _, m := range ms {
		m.stop()
	}
	if work == "" {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(work, "mnt-*"))
	for _, d := range dirs {
		if isMounted(d) {
			lazyUnmount(d)
		}
	}
}

func lazyUnmount(dir string) {
	if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
		exec.Command("fusermount", "-u", "-z", dir).Run()
	}
}

func isMounted(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountPath(fields[4]) == dir {
			return true
		}
	}
	return false
}

func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

var dropWarned bool

// dropCaches drops the kernel's page cache, dentries and inodes, as a cold
// measurement needs; where that is not allowed it says so once.
func dropCaches() {
	exec.Command("sync").Run()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil && !dropWarned {
		dropWarned = true
		fmt.Fprintf(os.Stderr, "bench: cannot drop caches (%v): cold rows are only cold for the daemons\n", err)
	}
	settle()
}

// quiet readies a warm measurement: dirty pages written back, then a
// quiet machine.
func quiet() {
	exec.Command("sync").Run()
	settle()
}

// cpuSeconds is a process's user plus system CPU time so far.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// After the command: state(0) ... utime is field 14 of the line, 12 here.
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// peakRSS is a process's VmHWM in bytes.
func peakRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb * 1024
			}
		}
	}
	return 0
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer l.Close()
	return l.Addr().String()
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 600 {
		s = "..." + s[len(s)-600:]
	}
	return s
}
