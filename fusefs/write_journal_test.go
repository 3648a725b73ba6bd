package fusefs_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// TestAJournalOutlivesItsFilesystem: files closed asynchronously while
// the store holds their uploads are in the journal; a filesystem started
// later on the same staging directory (a restarted mounter) shows them,
// with their content and attributes, in their directories, and uploads
// them. One journal serves one filesystem at a time.
func TestAJournalOutlivesItsFilesystem(t *testing.T) {
	mem := memstore.New()
	held := &heldPuts{Store: mem, release: make(chan struct{})}
	opts := fusefs.Options{AsyncClose: true, StagingDir: t.TempDir()}
	first, dir := mountFSOf(t, held, opts)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"sub/x": []byte("in a directory"), "y": randomBytes(70000), "private": []byte("0600")}
	for name, data := range files {
		mode := os.FileMode(0o644)
		if name == "private" {
			mode = 0o600
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, mode); err != nil {
			t.Fatalf("asynchronous close of %s: %v", name, err)
		}
	}
	if h := first.Health(); h.PendingUploads != 3 || h.PendingBytes != 14+70000+4 {
		t.Fatalf("health with three files closed and their uploads held: %+v", h)
	}
	if _, err := fusefs.New(mem, opts); !errors.Is(err, fusefs.ErrJournalInUse) {
		t.Fatalf("a second filesystem on a journal in use: %v, want ErrJournalInUse", err)
	}
	// Litter a crash can leave: a staging file never journaled.
	journal := filepath.Join(opts.StagingDir, "objfuse-journal")
	litter := filepath.Join(journal, "1-litter.data")
	if err := os.WriteFile(litter, []byte("never journaled"), 0o600); err != nil {
		t.Fatal(err)
	}

	first.Close() // as the first one's process would end, uploads held
	second, dir2 := mountFSOf(t, mem, opts)
	eventually(t, 30*time.Second, "every journaled file uploaded", func() bool { return second.Health().PendingUploads == 0 })
	// Checked while the first filesystem's uploads are still held: once
	// they fail, it removes what it journaled itself.
	if left, _ := filepath.Glob(filepath.Join(journal, "*.*")); len(left) != 0 {
		t.Fatalf("the journal still holds %v after every upload", left)
	}
	held.end() // the first filesystem's uploads fail now, too late to matter
	for name, want := range files {
		sameBytes(t, name, stored(t, mem, name), want)
		got, err := os.ReadFile(filepath.Join(dir2, name))
		if err != nil {
			t.Fatal(err)
		}
		sameBytes(t, name+" through the mount", got, want)
	}
	if o, err := mem.Head(context.Background(), "private"); err != nil || o.Metadata["mode"] != strconv.Itoa(syscall.S_IFREG|0o600) {
		t.Fatalf("private's metadata after its journaled upload: %v, %v; want mode 0600 kept", o.Metadata, err)
	}
	if _, err := os.Stat(litter); !os.IsNotExist(err) {
		t.Fatalf("litter in the journal after a restart: %v", err)
	}
	if h := second.Health(); h.LostUploads != 0 || h.PendingBytes != 0 {
		t.Fatalf("health after the uploads: %+v", h)
	}
}

// TestAChangeAfterACloseKeepsWhatItAcknowledged: a file closed
// asynchronously and then changed before its upload (truncated and
// rewritten, or written in place, through a descriptor still open) is
// restored, after a crash in the middle of the change, as the close left
// it: never as a half-made change, never as nothing.
func TestAChangeAfterACloseKeepsWhatItAcknowledged(t *testing.T) {
	for _, change := range []struct {
		name  string
		flags int
	}{{"truncated", os.O_WRONLY | os.O_TRUNC}, {"written in place", os.O_WRONLY}} {
		t.Run(change.name, func(t *testing.T) {
			mem := memstore.New()
			opts := fusefs.Options{AsyncClose: true, StagingDir: t.TempDir()}
			first, dir := mountFSOf(t, mem, opts)
			p := filepath.Join(dir, "f")
			acknowledged := []byte("what the close acknowledged")
			h, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.Write(acknowledged); err != nil {
				t.Fatal(err)
			}
			// Held open, so that no RELEASE uploads it; the change is
			// under way, not closed, when the "crash" comes.
			reader, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer reader.Close()
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			if n := first.Health().PendingUploads; n != 1 {
				t.Fatalf("%d pending after the close, want 1", n)
			}
			w, err := os.OpenFile(p, change.flags, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if _, err := w.WriteAt([]byte("HALF"), 3); err != nil {
				t.Fatal(err)
			}
			first.Close() // the journal is free: the process "ended"
			_, dir2 := mountFSOf(t, mem, opts)
			eventually(t, 10*time.Second, "the journaled content uploaded", func() bool {
				got, err := mem.Get(context.Background(), "f", store.AnyVersion, 0, -1)
				if err != nil {
					return false
				}
				defer got.Close()
				b, _ := io.ReadAll(got)
				return string(b) == string(acknowledged)
			})
			got, err := os.ReadFile(filepath.Join(dir2, "f"))
			if err != nil || string(got) != string(acknowledged) {
				t.Fatalf("f after the restart: %q, %v; want %q", got, err, acknowledged)
			}
		})
	}
}

// TestAnUnlinkedFileLeavesTheJournal: a file removed before its upload is
// not brought back by a restart.
func TestAnUnlinkedFileLeavesTheJournal(t *testing.T) {
	mem := memstore.New()
	opts := fusefs.Options{AsyncClose: true, StagingDir: t.TempDir()}
	f, dir := mountFSOf(t, mem, opts)
	p := filepath.Join(dir, "gone")
	h, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Write([]byte("kept open")); err != nil {
		t.Fatal(err)
	}
	// A second descriptor keeps the file open, so its content stays
	// journaled after the first close, and the unlink finds it there.
	keep, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.Health().PendingUploads; got != 1 {
		t.Fatalf("%d pending after an asynchronous close, want 1", got)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if h := f.Health(); h.PendingUploads != 0 {
		t.Fatalf("health after the unlink: %+v, want nothing pending", h)
	}
	records, _ := filepath.Glob(filepath.Join(opts.StagingDir, "objfuse-journal", "*.json"))
	if len(records) != 0 {
		t.Fatalf("journal records after the unlink: %v", records)
	}
}

// heldPuts holds the uploads of files (not directory markers) until end,
// then fails them, as an endpoint would that a crash left unanswered.
type heldPuts struct {
	store.Store
	release chan struct{}
	once    sync.Once
}

var errCrashed = errors.New("the process ended before S3 answered")

func (s *heldPuts) Put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	if strings.HasSuffix(key, "/") {
		return s.Store.Put(ctx, key, r, size, meta)
	}
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return store.Object{}, errCrashed
}

func (s *heldPuts) PutIfMatch(ctx context.Context, key, etag string, r io.Reader, size int64, meta map[string]string) (store.Object, error) {
	return s.Put(ctx, key, r, size, meta)
}

func (s *heldPuts) end() { s.once.Do(func() { close(s.release) }) }
