// Package takeover lets a new process serve a FUSE connection another
// process served and died on (or handed over), without the kernel or the
// programs using the mount noticing more than a pause.
//
// The kernel names inodes and open files by numbers the server chose
// (node ids, file handles) and holds on to them: a process's working
// directory, an open file, a cached dentry. A successor must answer for
// every number the kernel holds, but go-fuse numbers its nodes and handles
// from scratch in each process. So the numbers the kernel sees are this
// package's, not go-fuse's: FS sits between the fuse.Server and go-fuse's
// node bridge, gives out its own node ids and handles, translates each
// request and reply, and journals what a successor needs to translate them
// again: for each node id the parent and name it was looked up by, for each
// handle its node, open flags, and whether writes reached it since its last
// flush or fsync.
//
// A successor loads the journal (Load), serves the same connection
// (fuse.MountOptions.ResumeInit: no INIT), and revives a number the kernel
// sends when it first sees it: a node by looking its name up again, parent
// first; a handle by opening its node again with the same flags. A handle
// that had writes not yet flushed is not revived: those writes were in the
// dead process's memory and are gone, so every later call on it fails with
// EIO, telling the writer, never silently dropping its data.
//
// The journal is appended to before a reply carries a new number to the
// kernel, with a plain write: it has to outlive the process, not the
// machine (a machine that stops takes the connection with it).
package takeover
