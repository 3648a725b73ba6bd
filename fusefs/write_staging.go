package fusefs

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
)

// stagingFile is a local copy of a whole file, used where S3 cannot take
// the writes as they come: random writes, overwrites, appends, truncates.
// The file is unlinked as soon as it is created, so a crash leaves no
// litter, unless the mount has a journal: then it is a data file there,
// named by id, so that it can be journaled in place (write_journal.go). Its
// size counts against the mount's staging limit.
type stagingFile struct {
	fsys     *FS
	f        *os.File
	reserved int64
	id       string // its name in the journal, "" for none
	// journaled: its record is in the journal, so its content is what a
	// close acknowledged and must not change (fileNode.keepJournaledLocked).
	journaled bool
	// parts tracks what its writers wrote since it was made or last
	// uploaded, and uploads the parts they wrote whole; nil until they
	// write.
	parts *stagedParts
}

func (f *FS) newStaging() (*stagingFile, error) {
	if f.journal != nil {
		file, id, err := f.journal.newData()
		if err != nil {
			return nil, err
		}
		return &stagingFile{fsys: f, f: file, id: id}, nil
	}
	if err := os.MkdirAll(f.opts.StagingDir, 0o700); err != nil {
		return nil, fmt.Errorf("staging dir: %w", err)
	}
	file, err := os.CreateTemp(f.opts.StagingDir, "objfuse-staging-*")
	if err != nil {
		return nil, fmt.Errorf("staging file: %w", err)
	}
	os.Remove(file.Name())
	return &stagingFile{fsys: f, f: file}, nil
}

// reserve accounts for the file growing to size.
func (s *stagingFile) reserve(size int64) error {
	if size <= s.reserved {
		return nil
	}
	delta := size - s.reserved
	if s.fsys.staged.Add(delta) > s.fsys.opts.StagingLimit {
		s.fsys.staged.Add(-delta)
		return syscall.ENOSPC
	}
	s.reserved = size
	return nil
}

// keepRoomFor gives back what the file reserved past size bytes.
func (s *stagingFile) keepRoomFor(size int64) {
	if size < s.reserved {
		s.fsys.staged.Add(size - s.reserved)
		s.reserved = size
	}
}

// stagingHasRoom reports whether the staging limit has n bytes free now.
func (f *FS) stagingHasRoom(n int64) bool { return f.staged.Load()+n <= f.opts.StagingLimit }

func (s *stagingFile) WriteAt(p []byte, off int64) error {
	if err := s.reserve(off + int64(len(p))); err != nil {
		return err
	}
	// Counted before the write for a part in flight, and after it for
	// one that began to go up while the write was landing.
	s.parts.changed(off, int64(len(p)))
	_, err := s.f.WriteAt(p, off)
	s.parts.changed(off, int64(len(p)))
	return err
}

func (s *stagingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := s.f.ReadAt(p, off)
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func (s *stagingFile) Truncate(size int64) error {
	if err := s.reserve(size); err != nil {
		return err
	}
	if now, err := s.size(); err != nil || size < now {
		// Parts sent may lie past the new end: tracking starts over.
		s.parts.discard()
		s.parts = nil
	}
	return s.f.Truncate(size)
}

// written notes that a writer wrote size bytes at off, which uploads
// the parts this made whole while the file is still written
// (stagedParts); where says where the file goes.
func (s *stagingFile) written(off, size int64, where earlyUpload) {
	if s.parts == nil {
		s.parts = s.fsys.newStagedParts(s.f)
	}
	s.parts.written(off, size, where)
}

func (s *stagingFile) Close() {
	s.parts.discard()
	s.parts = nil
	s.f.Close()
	s.fsys.staged.Add(-s.reserved)
	s.reserved = 0
	if s.id != "" {
		s.fsys.journal.removeData(s.id)
	}
}

// size is the file's length now.
func (s *stagingFile) size() (int64, error) {
	fi, err := s.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// loadStaging copies version etag of key, whole, into a new staging file
// and says how long it is. size is the length its attributes said, which
// the version may belie: a server can answer a HEAD with one version's
// size and another's ETag (versitygw does, racing a PUT), and the first
// size bytes of an appended-to version are the older one's content. A
// change made from such a copy would be stored conditional on the newer
// version, and silently drop what it added. Read to its end, the copy is
// the version the GET conditional on its ETag gave, all of it.
func (f *FS) loadStaging(ctx context.Context, key, etag string, size int64) (*stagingFile, int64, error) {
	s, err := f.stagingFrom(size, strconv.Quote(key), func() (io.ReadCloser, error) {
		return f.store.Get(ctx, key, etag, 0, -1)
	})
	if err != nil {
		return nil, 0, err
	}
	got, err := s.size()
	if err != nil {
		s.Close()
		return nil, 0, err
	}
	return s, got, nil
}

// stagingFrom copies what open gives, of what, into a new staging file:
// size bytes are expected, and what more there is is taken too.
func (f *FS) stagingFrom(size int64, what string, open func() (io.ReadCloser, error)) (*stagingFile, error) {
	s, err := f.newStaging()
	if err != nil {
		return nil, err
	}
	if err := s.reserve(size); err != nil {
		s.Close()
		return nil, err
	}
	body, err := open()
	if err != nil {
		s.Close()
		return nil, err
	}
	defer body.Close()
	n, err := io.Copy(&stagingAppender{s: s}, body)
	if err == nil && n < size {
		err = fmt.Errorf("read %d of %d bytes of %s: %w", n, size, what, io.ErrUnexpectedEOF)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// stagingAppender writes to a staging file from off on, accounting for
// what it writes (WriteAt).
type stagingAppender struct {
	s   *stagingFile
	off int64
}

func (a *stagingAppender) Write(p []byte) (int, error) {
	if err := a.s.WriteAt(p, a.off); err != nil {
		return 0, err
	}
	a.off += int64(len(p))
	return len(p), nil
}
