package fusefs

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
)

// maxCachedEntries bounds the names one directory's listing cache keeps;
// larger directories are listed every time.
const maxCachedEntries = 100_000

// dirEntry is one child found by listing a directory.
type dirEntry struct {
	name  string
	isDir bool
	// obj is the file, or the directory's marker object when the listing
	// showed one. obj.Metadata is nil when the listing did not carry
	// metadata (servers other than MinIO): then a lookup must HEAD.
	obj store.Object
}

// listing is a directory's cached listing. Lookups answer from it while it
// is fresh, including "no such file" when it is complete.
type listing struct {
	entries map[string]dirEntry
	at      time.Time
}

// list reads the whole directory from the store. A file and a directory
// with the same name become the directory (see FS.resolve).
func (n *dirNode) list(ctx context.Context) ([]dirEntry, error) {
	dirKey := n.key()
	byName := map[string]int{}
	var out []dirEntry
	for e, err := range n.fsys.store.List(ctx, dirKey, "", false) {
		if err != nil {
			return nil, err
		}
		name, isPrefix := childName(dirKey, e.Name())
		if name == "" && !isPrefix {
			continue // the directory's own marker
		}
		if !validName(name) {
			n.fsys.stats.HiddenKeys.Add(1)
			continue
		}
		if i, ok := byName[name]; ok {
			if isPrefix && !out[i].isDir {
				out[i] = dirEntry{name: name, isDir: true}
			}
			n.fsys.stats.HiddenKeys.Add(1)
			continue
		}
		byName[name] = len(out)
		if isPrefix {
			out = append(out, dirEntry{name: name, isDir: true})
		} else {
			out = append(out, dirEntry{name: name, obj: e.Object})
		}
	}
	slices.SortFunc(out, func(a, b dirEntry) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// cached answers a lookup from a fresh listing: the entry, or
// found=false with ENOENT-worthy certainty when known=true.
func (n *dirNode) cached(name string) (e dirEntry, found, known bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.listCache
	if l == nil || time.Since(l.at) > n.fsys.opts.ListTTL {
		return dirEntry{}, false, false
	}
	e, found = l.entries[name]
	if found && !e.isDir && e.obj.Metadata == nil {
		return dirEntry{}, false, false // attributes unknown: ask the store
	}
	return e, found, true
}

func (n *dirNode) remember(entries []dirEntry) {
	if len(entries) > maxCachedEntries {
		return
	}
	l := &listing{entries: make(map[string]dirEntry, len(entries)), at: time.Now()}
	for _, e := range entries {
		l.entries[e.name] = e
	}
	n.mu.Lock()
	n.listCache = l
	n.mu.Unlock()
}

// noteChild records a change this mount made, so that a cached listing
// stays true. e == nil removes the name.
func (n *dirNode) noteChild(name string, e *dirEntry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listCache == nil {
		return
	}
	if e == nil {
		delete(n.listCache.entries, name)
	} else {
		n.listCache.entries[name] = *e
	}
}

// forget drops the cached listing.
func (n *dirNode) forget() {
	n.mu.Lock()
	n.listCache = nil
	n.mu.Unlock()
}

func typeOf(e dirEntry) uint32 {
	if e.isDir {
		return syscall.S_IFDIR
	}
	return syscall.S_IFREG
}

// shadow records that name is a directory hiding a file of the same name,
// and makes the kernel forget the file it was told about.
func (n *dirNode) shadow(name string) {
	n.mu.Lock()
	if n.shadowed == nil {
		n.shadowed = map[string]bool{}
	}
	n.shadowed[name] = true
	n.mu.Unlock()
	n.NotifyEntry(name)
}

func (n *dirNode) isShadowed(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.shadowed[name]
}
