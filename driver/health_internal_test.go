package driver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/objfuse/objfuse/mounter-pod/handoff"
)

type toldEvents struct {
	mu       sync.Mutex
	messages []string
}

func (e *toldEvents) Tell(_ context.Context, _ []string, _, reason, message string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.messages = append(e.messages, reason+": "+message)
	return nil
}

// Lost uploads are told once, across a restart of the node plugin (a new
// Driver over the same state), and from 0 again for a new mounter.
func TestLostUploadsAreToldOnceAcrossNodeRestarts(t *testing.T) {
	events := &toldEvents{}
	node := healthNode(t, events)
	d := node()
	ctx := context.Background()
	check := func(d *Driver, lost int64, want string) {
		t.Helper()
		st, err := d.node.state.load("vol")
		if err != nil {
			t.Fatal(err)
		}
		before := len(events.messages)
		d.node.noteHealth(ctx, st, handoff.Health{LostUploads: lost, LastLostUpload: "put \"f\": boom"})
		told := events.messages[before:]
		switch {
		case want == "" && len(told) != 0:
			t.Fatalf("%d lost: told %q, want nothing", lost, told)
		case want != "" && (len(told) != 1 || !strings.Contains(told[0], want)):
			t.Fatalf("%d lost: told %q, want one saying %q", lost, told, want)
		}
	}
	check(d, 2, "2 file(s)")
	check(d, 2, "")
	d = node() // the node plugin restarted
	check(d, 2, "")
	check(d, 3, "1 file(s)")
	check(d, 1, "1 file(s)") // a new mounter counts from 0
	check(d, 1, "")
}

// The Event of lost uploads names exactly the files lost since the last
// one, from the mounter's latest few, and says how many it cannot name.
func TestLostUploadsAreToldByName(t *testing.T) {
	cases := []struct {
		lost  int64
		files []string
		want  string
	}{
		{1, []string{"a"}, "The files: a."},
		{2, []string{"old", "a", "b"}, "The files: a, b."},
		{5, []string{"a", "b"}, "The files: a, b and 3 more (the mounter's log names every one)."},
		{1, nil, "The files: not named (an older mounter)."},
	}
	for _, tc := range cases {
		got := lostNames(handoff.Health{LostFiles: tc.files}, tc.lost)
		if want := strings.TrimSuffix(strings.TrimPrefix(tc.want, "The files: "), "."); got != want {
			t.Errorf("%d lost of %q: %q, want %q", tc.lost, tc.files, got, want)
		}
	}
	events := &toldEvents{}
	d := healthNode(t, events)()
	st, err := d.node.state.load("vol")
	if err != nil {
		t.Fatal(err)
	}
	d.node.noteHealth(context.Background(), st, handoff.Health{LostUploads: 2, LostFiles: []string{"dir/one", "two"}, LastLostUpload: "boom"})
	if len(events.messages) != 1 || !strings.Contains(events.messages[0], "The files: dir/one, two.") {
		t.Fatalf("told %q, want one Event naming dir/one and two", events.messages)
	}
}

// A mounter pod replaced without reporting (deleted with no grace) took
// its journal with it: the pods are told of the files its last check
// said were waiting, once; a mounter that reported them lost itself, or
// had nothing waiting, adds nothing.
func TestAReplacedMounterNamesTheFilesItHadPending(t *testing.T) {
	events := &toldEvents{}
	d := healthNode(t, events)()
	ctx := context.Background()
	st, err := d.node.state.load("vol")
	if err != nil {
		t.Fatal(err)
	}
	d.node.noteHealth(ctx, st, handoff.Health{PendingUploads: 3, PendingFiles: []string{"a", "dir/b"}})
	d.node.tellPendingGone(ctx, st)
	d.node.tellPendingGone(ctx, st) // a second replacement: nothing new
	if len(events.messages) != 1 || !strings.HasPrefix(events.messages[0], reasonUploadFailed) ||
		!strings.Contains(events.messages[0], "3 file(s)") || !strings.Contains(events.messages[0], "The files: a, dir/b and 1 more.") {
		t.Fatalf("told %q, want one %s naming a, dir/b and 1 more", events.messages, reasonUploadFailed)
	}
	// Drained: the last check saw them lost, none pending.
	d.node.noteHealth(ctx, st, handoff.Health{PendingUploads: 2, PendingFiles: []string{"c", "d"}})
	d.node.noteHealth(ctx, st, handoff.Health{LostUploads: 2, LostFiles: []string{"c", "d"}})
	before := len(events.messages)
	d.node.tellPendingGone(ctx, st)
	if len(events.messages) != before {
		t.Fatalf("told %q after the mounter reported its losses itself", events.messages[before:])
	}
}

// Write conflicts are told once each, naming the latest, across a restart
// of the node plugin, and from 0 again for a new mounter.
func TestWriteConflictsAreToldOnce(t *testing.T) {
	events := &toldEvents{}
	node := healthNode(t, events)
	d := node()
	check := func(d *Driver, conflicts int64, want string) {
		t.Helper()
		st, err := d.node.state.load("vol")
		if err != nil {
			t.Fatal(err)
		}
		before := len(events.messages)
		d.node.noteHealth(context.Background(), st, handoff.Health{Conflicts: conflicts, LastConflict: `"data/f": kept as "data/f.objfuse-conflict-x"`})
		told := events.messages[before:]
		switch {
		case want == "" && len(told) != 0:
			t.Fatalf("%d conflicts: told %q, want nothing", conflicts, told)
		case want != "" && (len(told) != 1 || !strings.Contains(told[0], want) || !strings.Contains(told[0], "data/f.objfuse-conflict-x") || !strings.HasPrefix(told[0], reasonConflict)):
			t.Fatalf("%d conflicts: told %q, want one %s saying %q and naming the file", conflicts, told, reasonConflict, want)
		}
	}
	check(d, 1, "1 change(s)")
	check(d, 1, "")
	d = node()
	check(d, 1, "")
	check(d, 3, "2 change(s)")
	check(d, 1, "1 change(s)") // a new mounter counts from 0
}

// healthNode saves the state of one staged volume, "vol", used by one
// pod, and returns a function that starts a node plugin over it (again:
// a restart) telling events.
func healthNode(t *testing.T, events *toldEvents) func() *Driver {
	dir := t.TempDir()
	node := func() *Driver {
		d, err := New(Options{Mode: ModeNode, NodeID: "n", KubeletDir: filepath.Join(dir, "kubelet"), StateDir: filepath.Join(dir, "state"), Events: events})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := node()
	st := &stagedVolume{VolumeID: "vol", Staging: filepath.Join(dir, "staging"), Targets: map[string]bool{filepath.Join(dir, "pods", "a", "mount"): false}}
	if err := os.MkdirAll(d.node.state.volumeDir("vol"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := d.node.state.save(st); err != nil {
		t.Fatal(err)
	}
	return node
}
