package fusefs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The journal keeps what an asynchronous close(2) acknowledged before
// its upload on the staging disk, so that a mounter that dies (OOM-killed,
// crashed, its container restarted) loses none of it: the next process to
// mount the same journal shows those files with their content and uploads
// them.
//
// With a journal, staging files are named files in its directory,
// "<id>.data". Journaling a file writes "<id>.json" beside its data: the
// key, the version the change started from and the attributes. The record
// goes once the content is in the store, or the file is unlinked; the data
// when the node lets go of its staging file. What a crash leaves is read
// back at the next start; data files without a record are litter, removed.
//
// Records are replaced by rename, so a reader sees one whole; neither
// file is fsynced: the journal outlives its process, as the page cache
// does, not the node's power. fsync(2) still uploads.
type journal struct {
	dir  string
	lock *os.File // flock'd: one mount per journal at a time
	// restored are the records found at start, for the root to place
	// (restore); unreadable says which could not be read, set aside.
	restored   []journalRecord
	unreadable []string
	stats      *Stats

	mu sync.Mutex
	// pending are the files journaled and not yet uploaded, by id.
	pending map[string]pendingFile
}

// journalRecord is what "<id>.json" holds.
type journalRecord struct {
	Key string `json:"key"`
	// Base is the version the change started from (store.AnyVersion for
	// content that replaces the object whole); Stored says the object
	// existed when it was journaled.
	Base     string            `json:"base,omitempty"`
	Stored   bool              `json:"stored,omitempty"`
	MtimeSet bool              `json:"mtimeSet,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`

	id string // from the file name
}

type pendingFile struct {
	rec  journalRecord
	size int64
}

const (
	dataSuffix   = ".data"
	recordSuffix = ".json"
	badSuffix    = ".bad" // after recordSuffix: a record that cannot be read
)

// ErrJournalInUse: another live mount holds the journal directory.
var ErrJournalInUse = errors.New("the journal directory is in use by another mount: give each mount with asynchronous close its own staging directory")

// openJournal takes the journal at dir for this mount, reads what an
// earlier process left there, and removes its litter.
func openJournal(dir string, stats *Stats) (*journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, ErrJournalInUse)
		}
		return nil, fmt.Errorf("journal: lock %s: %w", dir, err)
	}
	j := &journal{dir: dir, lock: lock, stats: stats, pending: map[string]pendingFile{}}
	if err := j.readBack(); err != nil {
		j.close()
		return nil, err
	}
	return j, nil
}

// readBack reads the records an earlier process left and removes data
// files without one, and records half written.
func (j *journal) readBack() error {
	names, err := os.ReadDir(j.dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	has := map[string]bool{}
	for _, e := range names {
		has[e.Name()] = true
	}
	for _, e := range names {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, recordSuffix):
			id := strings.TrimSuffix(name, recordSuffix)
			if !has[id+dataSuffix] {
				os.Remove(filepath.Join(j.dir, name))
				continue
			}
			r, err := j.readRecord(id)
			if err != nil {
				// Torn (a power cut: records are not fsynced) or
				// foreign: set aside with its data for a person, not a
				// reason for the mount to fail.
				os.Rename(filepath.Join(j.dir, name), filepath.Join(j.dir, name+badSuffix))
				j.unreadable = append(j.unreadable, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			fi, err := os.Stat(filepath.Join(j.dir, id+dataSuffix))
			if err != nil {
				return fmt.Errorf("journal: %w", err)
			}
			// Pending from now on, served or not: what a person sees
			// (metrics, Health) is what the disk holds.
			j.track(id, r, fi.Size())
			j.restored = append(j.restored, r)
		case strings.HasSuffix(name, dataSuffix):
			id := strings.TrimSuffix(name, dataSuffix)
			if !has[id+recordSuffix] && !has[id+recordSuffix+badSuffix] {
				os.Remove(filepath.Join(j.dir, name))
			}
		case strings.HasSuffix(name, recordSuffix+".tmp"):
			os.Remove(filepath.Join(j.dir, name))
		}
	}
	slices.SortFunc(j.restored, func(a, b journalRecord) int { return strings.Compare(a.id, b.id) })
	return nil
}

func (j *journal) readRecord(id string) (journalRecord, error) {
	var r journalRecord
	b, err := os.ReadFile(filepath.Join(j.dir, id+recordSuffix))
	if err != nil {
		return r, fmt.Errorf("journal: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("journal: record %s: %w", id, err)
	}
	r.id = id
	return r, nil
}

// newData creates a staging file in the journal, named so that it can
// be journaled in place.
func (j *journal) newData() (*os.File, string, error) {
	f, err := os.CreateTemp(j.dir, fmt.Sprintf("%d-*%s", time.Now().UnixNano(), dataSuffix))
	if err != nil {
		return nil, "", fmt.Errorf("staging file: %w", err)
	}
	return f, strings.TrimSuffix(filepath.Base(f.Name()), dataSuffix), nil
}

// openData opens the data of a record read back.
func (j *journal) openData(id string) (*os.File, error) {
	return os.OpenFile(filepath.Join(j.dir, id+dataSuffix), os.O_RDWR, 0)
}

// write journals r, the content of data file id now size bytes long.
func (j *journal) write(id string, r journalRecord, size int64) error {
	if err := j.writeRecord(id, r); err != nil {
		return err
	}
	j.track(id, r, size)
	return nil
}

// writeRecord replaces the record of data file id by r, whole.
func (j *journal) writeRecord(id string, r journalRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(j.dir, id+recordSuffix+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("journal: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(j.dir, id+recordSuffix)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// rekey moves the records of key from, or of the keys under it when it
// ends in "/", to to: a rename moved them. The rename holds the key gate
// for both, so no record of either is being written meanwhile.
func (j *journal) rekey(from, to string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	var errs []error
	for id, p := range j.pending {
		rest, under := strings.CutPrefix(p.rec.Key, from)
		if !(rest == "" && under) && !(under && strings.HasSuffix(from, "/")) {
			continue
		}
		p.rec.Key = to + rest
		if err := j.writeRecord(id, p.rec); err != nil {
			errs = append(errs, err)
			continue
		}
		j.pending[id] = p
	}
	return errors.Join(errs...)
}

// track counts data file id, journaled as r and size bytes long, as
// pending until it is settled (or forgotten). A record read back that
// restoreFile refuses stays pending: it waits for a person.
func (j *journal) track(id string, r journalRecord, size int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	old, had := j.pending[id]
	j.pending[id] = pendingFile{rec: r, size: size}
	if !had {
		j.stats.PendingUploads.Add(1)
	}
	j.stats.PendingBytes.Add(size - old.size)
}

// settle removes the record of data file id: its content is in the
// store, or is not to be uploaded any more.
func (j *journal) settle(id string) {
	if j.forget(id) {
		os.Remove(filepath.Join(j.dir, id+recordSuffix))
	}
}

// removeData removes data file id, and its record if any.
func (j *journal) removeData(id string) {
	j.settle(id)
	os.Remove(filepath.Join(j.dir, id+dataSuffix))
}

// forget stops counting data file id as pending, and says whether it
// was, without removing anything: settle's first half, and alone for an
// upload cut by the process's stop, which a successor in the same pod
// makes.
func (j *journal) forget(id string) bool {
	j.mu.Lock()
	old, had := j.pending[id]
	delete(j.pending, id)
	j.mu.Unlock()
	if had {
		j.stats.PendingUploads.Add(-1)
		j.stats.PendingBytes.Add(-old.size)
	}
	return had
}

// pendingKeys are the keys of files journaled and not uploaded, sorted,
// at most max of them.
func (j *journal) pendingKeys(max int) []string {
	j.mu.Lock()
	keys := make([]string, 0, len(j.pending))
	for _, p := range j.pending {
		keys = append(keys, p.rec.Key)
	}
	j.mu.Unlock()
	slices.Sort(keys)
	return keys[:min(len(keys), max)]
}

func (j *journal) close() {
	j.lock.Close() // and with it the flock
}
