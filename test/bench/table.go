package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

const rawName = "raw minio-go"

// results holds every round's figure: filesystem -> metric -> rounds.
type results map[string]map[string][]float64

func (r results) add(fs string, m map[string]float64) {
	if r[fs] == nil {
		r[fs] = map[string][]float64{}
	}
	for k, v := range m {
		r[fs][k] = append(r[fs][k], v)
	}
}

func (r results) median(fs, key string) (float64, bool) {
	xs := r[fs][key]
	if len(xs) == 0 {
		return 0, false
	}
	return median(xs), true
}

// metric is one line of the table.
type metric struct {
	key    string // figure in results
	row    string // the row that measures it
	name   string
	higher bool   // higher is better
	fmt    string // printf format of a figure
	// objfuse is the variant shown in the objfuse column ("objfuse").
	objfuse string
	// rawNote says what the raw column is for this metric.
	rawNote string
	// rawKey is the raw client's figure to compare with, when not key.
	rawKey string
}

func metrics(e *env) []metric {
	sz := humanSize(e.size)
	ms := []metric{
		{key: "write_mbps", row: "write", name: "seq write " + sz + ", MB/s until complete in S3", higher: true, fmt: "%.0f", rawNote: "PutObject"},
		{key: "write_mbps", row: "write", name: "  same, objfuse " + writebackFlag, higher: true, fmt: "%.0f", objfuse: "objfuse-wb", rawNote: "PutObject"},
		{key: "write_mbps", row: "write", name: "  same, objfuse " + lowMemoryFlag + ", GOMEMLIMIT=" + lowMemoryGoLimit, higher: true, fmt: "%.0f", objfuse: "objfuse-lowmem", rawNote: "PutObject"},
		{key: "write_close_mbps", row: "write", name: "seq write " + sz + ", MB/s until close() returns", higher: true, fmt: "%.0f", rawNote: "PutObject"},
		{key: "write_cpu", row: "write", name: "daemon CPU-s per GiB written", fmt: "%.2f", rawNote: "client CPU"},
		{key: "write_rss", row: "write", name: "daemon peak RSS during the write (VmHWM), MB", fmt: "%.0f"},
		{key: "write_rss", row: "write", name: "  same, objfuse " + lowMemoryFlag + ", GOMEMLIMIT=" + lowMemoryGoLimit, fmt: "%.0f", objfuse: "objfuse-lowmem"},
		{key: smallWriteKey(4 << 10), rawKey: "write_mbps", row: "smallwrite", name: "seq write " + sz + " in 4 KiB writes (dd bs=4k), MB/s until complete in S3", higher: true, fmt: "%.0f", rawNote: "PutObject"},
		{key: smallWriteKey(4 << 10), rawKey: "write_mbps", row: "smallwrite", name: "  same, objfuse " + writebackFlag, higher: true, fmt: "%.0f", objfuse: "objfuse-wb", rawNote: "PutObject"},
		{key: smallWriteKey(64 << 10), rawKey: "write_mbps", row: "smallwrite", name: "seq write " + sz + " in 64 KiB writes (dd bs=64k), MB/s until complete in S3", higher: true, fmt: "%.0f", rawNote: "PutObject"},
		{key: smallWriteKey(64 << 10), rawKey: "write_mbps", row: "smallwrite", name: "  same, objfuse " + writebackFlag, higher: true, fmt: "%.0f", objfuse: "objfuse-wb", rawNote: "PutObject"},
		{key: "read_mbps", row: "read", name: "seq read " + sz + " cold, MB/s", higher: true, fmt: "%.0f", rawNote: "GetObject"},
		{key: "read_cpu", row: "read", name: "daemon CPU-s per GiB read", fmt: "%.2f", rawNote: "client CPU"},
		{key: "rand_p50", row: "rand", name: fmt.Sprintf("first %d random 4 KiB reads after cold mount, p50 µs", e.randReads), fmt: "%.0f", rawNote: "ranged GET"},
		{key: "rand_p99", row: "rand", name: fmt.Sprintf("first %d random 4 KiB reads after cold mount, p99 µs", e.randReads), fmt: "%.0f", rawNote: "ranged GET"},
		{key: "rand_again_p50", rawKey: "rand_p50", row: "rand", name: "the same reads again after the kernel dropped its pages, p50 µs", fmt: "%.0f", rawNote: "ranged GET"},
		{key: "rand_again_p50", rawKey: "rand_p50", row: "rand", name: "  same, objfuse " + readCacheFlag, fmt: "%.0f", objfuse: "objfuse-cache", rawNote: "ranged GET"},
		{key: "rand_again_p99", rawKey: "rand_p99", row: "rand", name: "the same reads again after the kernel dropped its pages, p99 µs", fmt: "%.0f", rawNote: "ranged GET"},
		{key: "rand_again_p99", rawKey: "rand_p99", row: "rand", name: "  same, objfuse " + readCacheFlag, fmt: "%.0f", objfuse: "objfuse-cache", rawNote: "ranged GET"},
		{key: "create_fps", row: "create", name: fmt.Sprintf("create %d × 4 KiB files, files/s until all listed in S3", e.files), higher: true, fmt: "%.0f", rawNote: "PutObject, one at a time"},
		{key: "create_fps", row: "create", name: fmt.Sprintf("  same, objfuse --async-close"), higher: true, fmt: "%.0f", objfuse: "objfuse-async", rawNote: "PutObject, one at a time"},
		{key: "create_fps", rawKey: "create_par_fps", row: "create", name: "  same, objfuse --async-close, against 32 raw PUTs in parallel", higher: true, fmt: "%.0f", objfuse: "objfuse-async", rawNote: "PutObject, 32 in parallel"},
		{key: "create_close_fps", row: "create", name: fmt.Sprintf("create %d × 4 KiB files, files/s until the last close()", e.files), higher: true, fmt: "%.0f", rawNote: "PutObject, one at a time"},
		{key: "create_close_fps", row: "create", name: "  same, objfuse --async-close", higher: true, fmt: "%.0f", objfuse: "objfuse-async", rawNote: "PutObject, one at a time"},
	}
	for _, n := range e.lsSizes {
		ms = append(ms,
			metric{key: fmt.Sprintf("ls_cold_%d", n), row: "ls", name: fmt.Sprintf("`ls -l` of %d objects, cold, s", n), fmt: "%.3f", rawNote: "ListObjectsV2"},
			metric{key: fmt.Sprintf("ls_cold_%d", n), rawKey: fmt.Sprintf("ls_meta_cold_%d", n), row: "ls", name: "  same, against a raw listing with metadata, as objfuse lists", fmt: "%.3f", rawNote: "ListObjectsV2 with MinIO's metadata=true"},
			metric{key: fmt.Sprintf("ls_warm_%d", n), row: "ls", name: fmt.Sprintf("`ls -l` of %d objects, warm, s", n), fmt: "%.3f", rawNote: "ListObjectsV2"})
	}
	ms = append(ms,
		metric{key: "stat_p50", row: "stat", name: "stat of a never-listed file, p50 µs", fmt: "%.0f", rawNote: "HEAD"},
		metric{key: "stat_p99", row: "stat", name: "stat of a never-listed file, p99 µs", fmt: "%.0f", rawNote: "HEAD"},
		metric{key: "stat_mean", row: "stat", name: fmt.Sprintf("stat of %d never-listed files of a directory of %d, mean µs", e.stats, e.lsSizes[len(e.lsSizes)-1]), fmt: "%.0f", rawNote: "HEAD"},
		metric{key: "loader_fps", row: "loader", name: fmt.Sprintf("data loader: %d × %s files read whole by %d readers, cold, files/s", e.loaderFiles, humanSize(e.loaderSize), loaderReaders), higher: true, fmt: "%.0f", rawNote: fmt.Sprintf("GetObject, %d in parallel", loaderReaders)},
		metric{key: "loader_cpu", row: "loader", name: "  daemon CPU-s per 1000 files", fmt: "%.2f", rawNote: "client CPU"},
	)
	for i := range ms {
		if ms[i].objfuse == "" {
			ms[i].objfuse = "objfuse"
		}
	}
	return ms
}

// printTable prints one markdown table: each figure (median of rounds),
// objfuse's ratio to the raw client and to the best peer, with which way
// is better.
func printTable(w io.Writer, e *env, res results, vs []*variant, cfg string, notes []string) {
	var peers []string
	for _, v := range vs {
		if !v.objfuse {
			peers = append(peers, v.name)
		}
	}
	fmt.Fprintf(w, "\n%s\n\n", cfg)
	hdr := []string{"metric", "better", rawName, "objfuse"}
	hdr = append(hdr, peers...)
	hdr = append(hdr, "objfuse ÷ raw", "objfuse ÷ best peer")
	fmt.Fprintf(w, "| %s |\n", strings.Join(hdr, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(hdr)))
	for _, m := range metrics(e) {
		if len(res[m.objfuse][m.key]) == 0 && len(res[rawName][m.key]) == 0 && !anyPeer(res, peers, m.key) {
			continue
		}
		rawKey := m.key
		if m.rawKey != "" {
			rawKey = m.rawKey
		}
		cell := func(fs string) string {
			key := m.key
			if fs == rawName {
				key = rawKey
			}
			v, ok := res.median(fs, key)
			if !ok {
				return "–"
			}
			return fmt.Sprintf(m.fmt, v)
		}
		better := "lower"
		if m.higher {
			better = "higher"
		}
		line := []string{m.name, better, cell(rawName), cell(m.objfuse)}
		bestName, best, haveBest := "", 0.0, false
		for _, p := range peers {
			line = append(line, cell(p))
			if v, ok := res.median(p, m.key); ok && v > 0 {
				if !haveBest || (m.higher && v > best) || (!m.higher && v < best) {
					bestName, best, haveBest = p, v, true
				}
			}
		}
		ov, ok := res.median(m.objfuse, m.key)
		ratio := func(other float64, have bool) string {
			if !ok || !have || other == 0 {
				return "–"
			}
			return fmt.Sprintf("%s%s", fmtRatio(ov/other), verdict(ov/other, m.higher))
		}
		rv, rok := res.median(rawName, rawKey)
		line = append(line, ratio(rv, rok))
		if haveBest {
			line = append(line, ratio(best, true)+" ("+bestName+")")
		} else {
			line = append(line, "–")
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(line, " | "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Raw column: write = one PutObject, read = one GetObject stream, random reads = ranged 4 KiB GETs, creates = sequential 4 KiB PutObjects,\n")
	fmt.Fprintf(w, "`ls -l` = a delimited ListObjectsV2 (same figure cold and warm), stat = one HEAD; CPU rows are the raw client's own CPU.\n")
	fmt.Fprintf(w, "Cold rows (objfuse, peers and the raw anchors of reads, listings and HEADs) start after echo 3 > /proc/sys/vm/drop_caches.\n")
	fmt.Fprintf(w, "Ratios are objfuse's figure divided by the other; ✓ means objfuse is at least as good, ✗ worse by more than 10%%, ≈ within 10%%.\n")
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func anyPeer(res results, peers []string, key string) bool {
	for _, p := range peers {
		if len(res[p][key]) > 0 {
			return true
		}
	}
	return false
}

func fmtRatio(r float64) string {
	switch {
	case math.IsInf(r, 0) || math.IsNaN(r):
		return "–"
	case r >= 10:
		return fmt.Sprintf("%.0f×", r)
	case r >= 0.1:
		return fmt.Sprintf("%.2f×", r)
	}
	return fmt.Sprintf("%.3f×", r)
}

// verdict marks whether a ratio is good for objfuse.
func verdict(r float64, higher bool) string {
	if !higher {
		r = 1 / r
	}
	switch {
	case r >= 1:
		return " ✓"
	case r >= 0.9:
		return " ≈"
	}
	return " ✗"
}

func sortedKeys(m map[string]float64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
