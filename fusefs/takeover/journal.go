package takeover

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Saved is what a journal holds: the numbers the kernel may still use,
// and what each stands for.
type Saved struct {
	Nodes   map[uint64]SavedNode
	Handles map[uint64]SavedHandle
	// NextNode and NextHandle are the first numbers never given out: a
	// successor starts there, so a number the kernel still holds never
	// comes to mean something else.
	NextNode, NextHandle uint64
	// HandedOver: the journal's writer handed the connection over at a
	// request boundary (FS.HandOver) and answered nothing after.
	HandedOver bool
}

// SavedNode is a node id's place in the tree. Parent 0 means the node has
// no name any more (removed, or made without one): it cannot be revived.
type SavedNode struct {
	Parent uint64
	Name   string
	// Type is the node's file type (the S_IFMT bits of its mode): a name
	// that now holds another type is not the node the kernel means.
	Type uint32
}

// SavedHandle is an open file or directory.
type SavedHandle struct {
	Node  uint64
	Flags uint32
	Dir   bool
	// Dirty: writes reached it since its last successful flush or fsync.
	Dirty bool
}

func newSaved() *Saved {
	return &Saved{Nodes: map[uint64]SavedNode{}, Handles: map[uint64]SavedHandle{},
		NextNode: firstNode, NextHandle: 1}
}

// firstNode is the first node id after the root's (FUSE_ROOT_ID, 1).
const firstNode = 2

// The journal is lines of text, one record each, names quoted as Go
// strings (a name may hold a newline):
//
//	next NODE HANDLE         the counters (a compacted journal's first line)
//	n ID PARENT TYPE "NAME"  node id ID is PARENT's entry NAME
//	m ID PARENT "NAME"       ID moved (renamed) there
//	u ID                     ID lost its name (unlinked, or replaced)
//	f ID                     the kernel forgot ID
//	o FH ID FLAGS DIR DIRTY  handle FH opened on node ID
//	w FH                     FH has writes not flushed yet
//	c FH                     FH flushed or fsynced
//	r FH                     FH released
//	h                        handed over: no request after was begun
const journalVersion = "objfuse-takeover v1"

// Journal appends records to a file in the state directory.
type Journal struct {
	path    string
	f       *os.File
	records int
	// size is the file's length after its last whole record.
	size int64
}

// Load reads the journal at path. A last line with no newline is a record
// whose write was cut short and is dropped: it may be the head of a
// longer one ("f 5" of "f 57"). Each record is one write(2), yet one
// write can stop midway: the disk fills, or a SIGKILL arrives between two
// of the pages a record spans (the kernel checks for one per page). A
// writer that outlives a failed append cuts the file back (append), so a
// partial line is only ever the last.
func Load(path string) (*Saved, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read takeover journal: %w", err)
	}
	defer f.Close()
	s, err := parse(f)
	if err != nil {
		return nil, fmt.Errorf("read takeover journal %s: %w", path, err)
	}
	return s, nil
}

// errBadRecord marks a line that is not a record.
var errBadRecord = errors.New("bad record")

func parse(r io.Reader) (*Saved, error) {
	s := newSaved()
	br := bufio.NewReader(r)
	if head, err := br.ReadString('\n'); err != nil || head != journalVersion+"\n" {
		return nil, fmt.Errorf("not a journal of this version (want first line %q)", journalVersion)
	}
	for line := 2; ; line++ {
		rec, err := br.ReadString('\n')
		if err == io.EOF {
			return s, nil // rec, if any, is a write cut short (Load)
		}
		if err != nil {
			return nil, err
		}
		if err := s.apply(rec[:len(rec)-1]); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
	}
}

// apply takes one record into s.
func (s *Saved) apply(line string) error {
	op, rest, _ := strings.Cut(line, " ")
	var (
		f   []uint64
		err error
	)
	switch op {
	case "next":
		if f, _, err = fields(rest, 2, false); err == nil {
			s.NextNode, s.NextHandle = max(s.NextNode, f[0]), max(s.NextHandle, f[1])
		}
	case "n":
		var name string
		if f, name, err = fields(rest, 3, true); err == nil {
			s.Nodes[f[0]] = SavedNode{Parent: f[1], Type: uint32(f[2]), Name: name}
			s.NextNode = max(s.NextNode, f[0]+1)
		}
	case "m":
		var name string
		if f, name, err = fields(rest, 2, true); err == nil {
			if n, ok := s.Nodes[f[0]]; ok {
				n.Parent, n.Name = f[1], name
				s.Nodes[f[0]] = n
			}
		}
	case "u":
		if f, _, err = fields(rest, 1, false); err == nil {
			if n, ok := s.Nodes[f[0]]; ok {
				n.Parent, n.Name = 0, ""
				s.Nodes[f[0]] = n
			}
		}
	case "f":
		if f, _, err = fields(rest, 1, false); err == nil {
			delete(s.Nodes, f[0])
		}
	case "o":
		if f, _, err = fields(rest, 5, false); err == nil {
			s.Handles[f[0]] = SavedHandle{Node: f[1], Flags: uint32(f[2]), Dir: f[3] == 1, Dirty: f[4] == 1}
			s.NextHandle = max(s.NextHandle, f[0]+1)
		}
	case "w", "c":
		if f, _, err = fields(rest, 1, false); err == nil {
			if h, ok := s.Handles[f[0]]; ok {
				h.Dirty = op == "w"
				s.Handles[f[0]] = h
			}
		}
	case "h":
		if rest != "" {
			err = fmt.Errorf("%w: trailing %q", errBadRecord, rest)
		}
		s.HandedOver = true
	case "r":
		if f, _, err = fields(rest, 1, false); err == nil {
			delete(s.Handles, f[0])
		}
	default:
		return fmt.Errorf("%w: unknown record %q", errBadRecord, op)
	}
	return err
}

// fields parses n numbers and, when named, a quoted name after them.
func fields(rest string, n int, named bool) ([]uint64, string, error) {
	out := make([]uint64, n)
	for i := range n {
		var tok string
		tok, rest, _ = strings.Cut(rest, " ")
		v, err := strconv.ParseUint(tok, 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %v", errBadRecord, err)
		}
		out[i] = v
	}
	if !named {
		if rest != "" {
			return nil, "", fmt.Errorf("%w: trailing %q", errBadRecord, rest)
		}
		return out, "", nil
	}
	name, err := strconv.Unquote(rest)
	if err != nil {
		return nil, "", fmt.Errorf("%w: name %s: %v", errBadRecord, rest, err)
	}
	return out, name, nil
}

// Create writes s as a new journal at path (replacing one there) and
// opens it for appending.
func Create(path string, s *Saved) (*Journal, error) {
	j := &Journal{path: path}
	if err := j.rewrite(s); err != nil {
		return nil, err
	}
	return j, nil
}

// rewrite replaces the journal with one holding just s: written aside
// and renamed over, so that a death midway leaves the old one whole.
func (j *Journal) rewrite(s *Saved) error {
	tmp := j.path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write takeover journal: %w", err)
	}
	cw := &countingWriter{w: f}
	w := bufio.NewWriter(cw)
	fmt.Fprintln(w, journalVersion)
	fmt.Fprintf(w, "next %d %d\n", s.NextNode, s.NextHandle)
	for id, n := range s.Nodes {
		fmt.Fprintln(w, nodeRecord(id, n))
	}
	for fh, h := range s.Handles {
		fmt.Fprintln(w, handleRecord(fh, h))
	}
	if s.HandedOver {
		fmt.Fprintln(w, "h")
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, j.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write takeover journal %s: %w", j.path, err)
	}
	nf, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("open takeover journal: %w", err)
	}
	if j.f != nil {
		j.f.Close()
	}
	j.f, j.records, j.size = nf, 0, cw.n
	return nil
}

// countingWriter counts what goes through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func nodeRecord(id uint64, n SavedNode) string {
	return fmt.Sprintf("n %d %d %d %s", id, n.Parent, n.Type, strconv.Quote(n.Name))
}

func handleRecord(fh uint64, h SavedHandle) string {
	return fmt.Sprintf("o %d %d %d %d %d", fh, h.Node, h.Flags, bit(h.Dir), bit(h.Dirty))
}

func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

// append writes one record. One write(2) per record: a process killed
// between two leaves whole lines. A write that fails midway (a full disk)
// is cut off again, so that the records after it, once there is room,
// follow a whole line.
func (j *Journal) append(record string) error {
	n, err := j.f.WriteString(record + "\n")
	if err != nil {
		if n > 0 {
			if terr := j.f.Truncate(j.size); terr != nil {
				err = errors.Join(err, terr)
			}
		}
		return fmt.Errorf("append to takeover journal %s: %w", j.path, err)
	}
	j.size += int64(n)
	j.records++
	return nil
}

// Close closes the journal's file.
func (j *Journal) Close() error { return j.f.Close() }

// Remove deletes the journal: its connection is gone for good.
func (j *Journal) Remove() error {
	j.f.Close()
	if err := os.Remove(j.path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// Path is where the journal of the connection served from stateDir lives.
func Path(stateDir string) string { return filepath.Join(stateDir, "takeover.journal") }
