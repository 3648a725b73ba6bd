package takeover

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// oddNames are names a journal line must carry whole: a newline, quotes,
// spaces, a backslash, bytes that are not UTF-8.
var oddNames = []string{"plain", "two words", "new\nline", `say "hi"`, `back\slash`, "tab\there", " lead", "trail ", "\xff\xfe", "ünï", "'", "`"}

// journalOf creates a journal at a new path holding s.
func journalOf(t *testing.T, s *Saved) *Journal {
	t.Helper()
	j, err := Create(filepath.Join(t.TempDir(), "journal"), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func appendAll(t *testing.T, j *Journal, records ...string) {
	t.Helper()
	for _, r := range records {
		if err := j.append(r); err != nil {
			t.Fatal(err)
		}
	}
}

func load(t *testing.T, path string) *Saved {
	t.Helper()
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sameSaved(t *testing.T, got, want *Saved) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("loaded\n%+v\nwant\n%+v", got, want)
	}
}

func TestJournalRoundTrip(t *testing.T) {
	start := &Saved{
		Nodes:   map[uint64]SavedNode{2: {Parent: 1, Name: "dir", Type: syscall.S_IFDIR}},
		Handles: map[uint64]SavedHandle{1: {Node: 2, Flags: syscall.O_RDONLY, Dir: true}},
		// Counters beyond anything in the tables: a compacted journal's.
		NextNode: 40, NextHandle: 9,
	}
	j := journalOf(t, start)
	want := &Saved{Nodes: map[uint64]SavedNode{2: start.Nodes[2]}, Handles: map[uint64]SavedHandle{1: start.Handles[1]}, NextNode: 40, NextHandle: 9}
	for i, name := range oddNames {
		id := uint64(50 + i)
		n := SavedNode{Parent: 2, Name: name, Type: syscall.S_IFREG}
		appendAll(t, j, nodeRecord(id, n))
		want.Nodes[id] = n
	}
	want.NextNode = 50 + uint64(len(oddNames))
	appendAll(t, j,
		"m 50 1 "+strconv.Quote("moved\n here"), // renamed
		"u 51",                                     // unlinked
		"f 52",                                     // forgotten
		"m 999 1 \"x\"", "u 999", "w 999", "c 999", // about numbers it no longer holds: nothing
		handleRecord(20, SavedHandle{Node: 53, Flags: syscall.O_WRONLY | syscall.O_CREAT}),
		handleRecord(21, SavedHandle{Node: 54, Flags: syscall.O_RDWR, Dirty: true}),
		handleRecord(22, SavedHandle{Node: 55, Flags: syscall.O_RDONLY}),
		"w 20", "c 21", "r 22", "r 1",
	)
	want.Nodes[50] = SavedNode{Parent: 1, Name: "moved\n here", Type: syscall.S_IFREG}
	want.Nodes[51] = SavedNode{Type: syscall.S_IFREG}
	delete(want.Nodes, 52)
	want.Handles = map[uint64]SavedHandle{
		20: {Node: 53, Flags: syscall.O_WRONLY | syscall.O_CREAT, Dirty: true},
		21: {Node: 54, Flags: syscall.O_RDWR},
	}
	want.NextHandle = 23
	got := load(t, j.path)
	sameSaved(t, got, want)

	// Compacted, it says the same.
	if err := j.rewrite(got); err != nil {
		t.Fatal(err)
	}
	sameSaved(t, load(t, j.path), want)
}

// A last line cut anywhere loses that line and nothing before it; "f 5"
// cut from "f 57" must not forget node 5.
func TestJournalCutLastLine(t *testing.T) {
	for _, last := range []string{"f 57", nodeRecord(60, SavedNode{Parent: 1, Name: "a\nb c", Type: syscall.S_IFREG}), "o 3 5 2 0 0"} {
		j := journalOf(t, newSaved())
		appendAll(t, j, nodeRecord(5, SavedNode{Parent: 1, Name: "five", Type: syscall.S_IFREG}), nodeRecord(57, SavedNode{Parent: 1, Name: "57", Type: syscall.S_IFREG}))
		want := load(t, j.path)
		appendAll(t, j, last)
		whole, err := os.ReadFile(j.path)
		if err != nil {
			t.Fatal(err)
		}
		for cut := len(whole) - len(last) - 1; cut < len(whole); cut++ {
			if err := os.WriteFile(j.path, whole[:cut], 0o600); err != nil {
				t.Fatal(err)
			}
			sameSaved(t, load(t, j.path), want)
		}
	}
}

// A bad whole line is corruption, not a cut write: Load says so.
func TestJournalBadLine(t *testing.T) {
	for _, bad := range []string{"n 5 1 0 \"unterminated", "x 1", "f", "f 5 6", "f -1", "o 1 2 3 4", "n 5 1 0 name"} {
		j := journalOf(t, newSaved())
		appendAll(t, j, "f 3", bad, "f 4")
		if _, err := Load(j.path); !errors.Is(err, errBadRecord) || !strings.Contains(err.Error(), "line 4") {
			t.Errorf("%q: got %v, want a bad record on line 4", bad, err)
		}
	}
	path := filepath.Join(t.TempDir(), "j")
	for _, head := range []string{"", "objfuse-takeover v1", "objfuse-takeover v0\n"} {
		os.WriteFile(path, []byte(head), 0o600)
		if _, err := Load(path); err == nil {
			t.Errorf("head %q: loaded", head)
		}
	}
}

// An append that fails midway is cut off again, so the next record does
// not join a partial line. The file size limit makes a write stop midway
// as a full disk does (Go ignores SIGXFSZ: the write fails with EFBIG).
func TestJournalFailedAppendCutBack(t *testing.T) {
	j := journalOf(t, newSaved())
	appendAll(t, j, "f 3")
	want := load(t, j.path)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	small := lim
	small.Cur = uint64(j.size) + 10
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &small); err != nil {
		t.Fatal(err)
	}
	err := j.append(nodeRecord(70, SavedNode{Parent: 1, Name: strings.Repeat("x", 100), Type: syscall.S_IFREG}))
	if rerr := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Fatal("an append past the file size limit succeeded")
	}
	sameSaved(t, load(t, j.path), want)
	appendAll(t, j, "f 4")
	sameSaved(t, load(t, j.path), want) // "f 4" of a node it never had: the same, and a whole line
	if fi, _ := os.Stat(j.path); fi.Size() != j.size {
		t.Errorf("journal is %d bytes, its writer thinks %d", fi.Size(), j.size)
	}
}

// FuzzParse: parse never panics, and what it accepts, written out whole
// (rewrite, as compaction does) and read again, is the same.
func FuzzParse(f *testing.F) {
	f.Add(journalVersion + "\nnext 9 4\nn 2 1 16384 \"d\"\nn 3 2 32768 \"a\\nb\"\nm 3 1 \"c d\"\no 1 3 2 0 1\nc 1\nu 2\nf 2\nr 7\n")
	f.Add(journalVersion + "\nn 5 1 0 `raw`\no 18446744073709551615 5 1 1 0\nf 5\nw 1")
	f.Add(journalVersion + "\nnext 3 2\nn 2 1 32768 \"f\"\no 1 2 1 0 0\nh\n")
	f.Add(journalVersion + "\nn 18446744073709551615 0 4294967296 'x'\n")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := parse(strings.NewReader(text))
		if err != nil {
			return
		}
		j, err := Create(filepath.Join(t.TempDir(), "journal"), s)
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		again, err := Load(j.path)
		if err != nil {
			t.Fatalf("a journal written from what parse accepted does not load: %v", err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("written and read again\n%+v\nparsed\n%+v", again, s)
		}
	})
}
