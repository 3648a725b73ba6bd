package fusefs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A rename moves the journal records of what it moved, on disk too: a
// file journaled under the old name is restored under the new one.
func TestRekeyMovesTheRecordsARenameMoved(t *testing.T) {
	var stats Stats
	dir := t.TempDir()
	j, err := openJournal(dir, &stats)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	for i, key := range []string{"d/a", "d/b/c", "dx", "e"} {
		f, id, err := j.newData()
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := j.write(id, journalRecord{Key: key, Base: "v" + key, Metadata: map[string]string{"mode": "33188"}}, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.rekey("d/", "z/"); err != nil {
		t.Fatal(err)
	}
	if err := j.rekey("e", "f"); err != nil {
		t.Fatal(err)
	}
	want := []string{"dx", "f", "z/a", "z/b/c"}
	if got := j.pendingKeys(10); !slices.Equal(got, want) {
		t.Fatalf("pending keys %q, want %q", got, want)
	}
	var onDisk []string
	records, _ := filepath.Glob(filepath.Join(dir, "*"+recordSuffix))
	for _, p := range records {
		var r journalRecord
		b, _ := os.ReadFile(p)
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if r.Base != "v"+map[string]string{"dx": "dx", "f": "e", "z/a": "d/a", "z/b/c": "d/b/c"}[r.Key] || r.Metadata["mode"] != "33188" {
			t.Fatalf("record %s after the rename: %+v, want the rest of it kept", p, r)
		}
		onDisk = append(onDisk, r.Key)
	}
	slices.Sort(onDisk)
	if !slices.Equal(onDisk, want) {
		t.Fatalf("records on disk name %q, want %q", onDisk, want)
	}
}

// A record that cannot be read (torn by a power cut) is set aside with
// its data; the journal opens, and restores the others.
func TestAnUnreadableRecordIsSetAside(t *testing.T) {
	var stats Stats
	dir := t.TempDir()
	for name, content := range map[string]string{"1-bad.data": "x", "1-bad.json": "", "2-good.data": "yy", "2-good.json": `{"key":"k"}`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	j, err := openJournal(dir, &stats)
	if err != nil {
		t.Fatalf("a journal with a torn record: %v", err)
	}
	if len(j.restored) != 1 || j.restored[0].Key != "k" || len(j.unreadable) != 1 {
		t.Fatalf("restored %+v, unreadable %q; want k restored and one set aside", j.restored, j.unreadable)
	}
	if stats.PendingUploads.Load() != 1 || stats.PendingBytes.Load() != 2 {
		t.Fatalf("pending %d files, %d bytes; want the restored one", stats.PendingUploads.Load(), stats.PendingBytes.Load())
	}
	j.close()
	// Opened again, the set-aside pair stays (not litter).
	j, err = openJournal(dir, &stats)
	if err != nil {
		t.Fatal(err)
	}
	j.close()
	for _, name := range []string{"1-bad.data", "1-bad.json.bad"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("%s: %v, want it kept", name, err)
		}
	}
}
