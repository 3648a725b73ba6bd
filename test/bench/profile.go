package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
)

// profile CPU-profiles one objfuse mount (through --metrics-addr, which
// also serves /debug/pprof) while it repeats each row's work, and writes
// DIR/VARIANT-ROW.pprof and DIR/VARIANT-ROW.top.txt (go tool pprof -top),
// for each objfuse variant measured. A remount would
// end the profile, so "cold" here is drop_caches plus waiting out the
// mount's 1 s caches.
func (e *env) profile(v *variant, dir string, secs int, rows map[string]bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	work := map[string]func(m *mount, i int) error{
		"write": func(m *mount, i int) error {
			name := fmt.Sprintf("prof-w%d.bin", i)
			defer e.client.RemoveObject(context.Background(), e.bucket, e.key(name), minio.RemoveObjectOptions{})
			if err := writeFile(filepath.Join(m.dir, name), e.size, e.pattern); err != nil {
				return err
			}
			return e.waitSize(name, e.size, 10*time.Minute)
		},
		"smallwrite": func(m *mount, i int) error {
			name := fmt.Sprintf("prof-sw%d.bin", i)
			defer e.client.RemoveObject(context.Background(), e.bucket, e.key(name), minio.RemoveObjectOptions{})
			if err := writeFileIn(filepath.Join(m.dir, name), e.size, e.pattern, smallWriteSizes[0]); err != nil {
				return err
			}
			return e.waitSize(name, e.size, 10*time.Minute)
		},
		"read": func(m *mount, i int) error {
			dropCaches()
			_, err := readAll(filepath.Join(m.dir, seqKey))
			return err
		},
		"rand": func(m *mount, i int) error {
			dropCaches()
			time.Sleep(1100 * time.Millisecond)
			f, err := os.Open(filepath.Join(m.dir, seqKey))
			if err != nil {
				return err
			}
			defer f.Close()
			buf := make([]byte, 4096)
			for _, off := range e.randOffsets(i) {
				if _, err := f.ReadAt(buf, off); err != nil {
					return err
				}
			}
			return nil
		},
		"stat": func(m *mount, i int) error {
			for _, name := range e.statNames(i) {
				if _, err := os.Stat(filepath.Join(m.dir, name)); err != nil {
					return err
				}
			}
			return nil
		},
		"ls": func(m *mount, i int) error {
			dropCaches()
			time.Sleep(1100 * time.Millisecond)
			n := e.lsSizes[len(e.lsSizes)-1]
			_, err := lsL(filepath.Join(m.dir, lsDir(n)), n)
			return err
		},
		"loader": func(m *mount, i int) error {
			dropCaches()
			_, err := inParallel(e.loaderNames(i), func(name string) (int64, error) { return readAll(filepath.Join(m.dir, name)) })
			return err
		},
		"create": func(m *mount, i int) error {
			prefix := fmt.Sprintf("prof-c%d", i)
			defer e.removePrefix(prefix + "/")
			d := filepath.Join(m.dir, prefix)
			if err := os.Mkdir(d, 0o755); err != nil {
				return err
			}
			for j := range e.files {
				if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d", j)), e.pattern[:4096], 0o644); err != nil {
					return err
				}
			}
			return nil
		},
	}
	for _, row := range rowOrder {
		if !rows[row] {
			continue
		}
		if work[row] == nil {
			return fmt.Errorf("row %s has no profile work", row)
		}
		m, err := e.startMount(v, true, true)
		if err != nil {
			return err
		}
		out := filepath.Join(dir, v.name+"-"+row+".pprof")
		logf("profiling %s for %ds: %s", v.name, secs, row)
		var done atomic.Bool
		loopErr := make(chan error, 1)
		iters := 0
		go func() {
			var err error
			for i := 0; !done.Load() && err == nil; i++ {
				err = work[row](m, i+1000)
				iters++
			}
			loopErr <- err
		}()
		perr := fetchProfile("http://"+m.metrics+"/debug/pprof/profile?seconds="+fmt.Sprint(secs), out)
		done.Store(true)
		werr := <-loopErr
		m.stop()
		if perr != nil {
			return perr
		}
		if werr != nil {
			return fmt.Errorf("%s: %w", row, werr)
		}
		top, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=15", v.bin, out).CombinedOutput()
		if err != nil {
			return fmt.Errorf("go tool pprof: %v: %s", err, top)
		}
		// Cumulative, objfuse's own frames and what they call into.
		cum, _ := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=25", "-focus", "objfuse|go-fuse|minio-go", v.bin, out).CombinedOutput()
		os.WriteFile(filepath.Join(dir, v.name+"-"+row+".top.txt"), append(top, cum...), 0o644)
		fmt.Printf("\n### %s CPU profile, row %s (%d iterations in %ds)\n%s\n%s", v.name, row, iters, secs, indent(string(top)), indent(string(cum)))
	}
	return nil
}

func fetchProfile(url, out string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}
