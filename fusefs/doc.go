// Package fusefs is objfuse's filesystem: an S3 bucket (or a prefix of one)
// served through FUSE with go-fuse's fs package. Keys map to paths, common
// prefixes and "dir/" marker objects to directories, and file attributes
// live in object metadata under the names s3fs uses, so a bucket written
// by either tool looks the same through both.
//
// A request runs one way: the kernel → a node or handle here → the store
// (package store; s3store on S3). The files are named for the concern they
// hold:
//
// The mount as a whole:
//   - fs.go: FS, New, Mount, Flush; keys and paths of inodes; what a key is
//     (file, directory, nothing)
//   - options.go: Options and their defaults
//   - attrs.go: attributes and the object metadata that holds them
//   - memory.go: the memory limit and the part buffers, shared by reads
//     and writes
//   - inodes.go: the bound on the inodes held
//   - interrupt.go: what an interrupted request does (patient,
//     uninterruptible)
//   - stop.go: stopping by a deadline (StopBy); upload contexts
//   - health.go: Health: a refusing store, uploads lost
//   - symlink.go: symbolic links
//
// A file (file_*):
//   - file_node.go: fileNode: attributes, the version the kernel is told
//     of, open, setattr, unlink
//   - file_handle.go: handle, one open file description
//
// Reading (read_*; the read cache is package readcache):
//   - read_handle.go: a handle's reads, all from one version (pin)
//   - read_ahead.go: reader: ranged GETs, and readahead chunks once reads
//     are sequential
//   - read_pipes.go: readahead chunks in pipes, spliced to the kernel
//   - read_reply.go: replies from buffered chunks
//
// Writing (write_*):
//   - write_handle.go: a handle's writes, flush and fsync
//   - write_local.go: a file's local content (a stream or a staging copy),
//     emptied, truncated or moved to staging
//   - write_stream.go: stream, a multipart upload sent as it is written
//   - write_staging.go: staging files, local copies on disk
//   - write_upload.go: making the object equal the local content (sync), and
//     the upload the last close leaves
//   - write_upload_state.go: uploadState, a file's pending content and
//     the failures its writers have still to hear of
//   - write_conflict.go: conditional uploads, conflict copies, this mount's
//     own versions
//   - write_journal.go: the journal of files closed asynchronously, on
//     disk
//   - write_journaled.go: files and the journal: what is kept, settled,
//     restored at mount
//
// Directories (dir_*):
//   - dir_node.go: dirNode: lookup, create, mkdir, unlink, rmdir, link
//   - dir_names.go: which key segments show as file names, and a child's
//     name in a listing
//   - dir_listing.go: listings, and the names they answer for a while
//   - dir_listmeta.go: HEADs of listed files ahead of a reader (ls -l)
//   - dir_stream.go: readdir, streamed as the listing arrives
//   - dir_rename.go: rename of files and directories
//   - dir_rename_gate.go: keyGate, which keeps a directory's rename and
//     changes under it apart; where renames put inodes
//
// Tests sit beside what they test, under its prefix; the behaviour suites
// (posix_test.go, exerciser_test.go, fault_test.go, version_test.go) run
// through real mounts on the memory store, MinIO and versitygw
// (mount_test.go).
package fusefs
