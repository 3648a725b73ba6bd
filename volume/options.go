package volume

import (
	"fmt"
	"strconv"
	"time"

	"github.com/objfuse/objfuse/fusefs/limits"
)

// A MountOption is one tunable of the filesystem a volume is mounted
// with: its StorageClass parameter (also its key in a volume context),
// the objfuse-mount flag that carries it, the values it takes and
// objfuse-mount's default. MountOptionTable lists them all; StorageClass
// parsing, the mounter's command line (mounter-pod/spec) and
// objfuse-mount's flags all read it, so a new option is one row here and
// the line in objfuse-mount that hands it to the filesystem.
type MountOption struct {
	Param string
	Flag  string
	Kind  OptionKind
	// Min and Max bound a Whole option.
	Min, Max int64
	// Default is objfuse-mount's, in the parameter's form ("" for uid
	// and gid: the user objfuse-mount runs as).
	Default string
	Usage   string
	// Negated: the flag says the opposite of the parameter, and is
	// given only when the parameter is false (batchSmallUploads=false is
	// --no-batching).
	Negated bool
}

// OptionKind is what values a MountOption takes.
type OptionKind int

const (
	Bool     OptionKind = iota // true or false
	Whole                      // a whole number from Min to Max
	Duration                   // a Go duration from 0s to 24h
	Mode                       // octal permissions up to 0777, kept as four digits
	Owner                      // a numeric user or group id
)

// MountOptionTable is every MountOption.
var MountOptionTable = []MountOption{
	{Param: ParamUID, Flag: "uid", Kind: Owner, Usage: "owner of files without owner metadata (default: the user objfuse-mount runs as; 0 in a mounter pod)"},
	{Param: ParamGID, Flag: "gid", Kind: Owner, Usage: "group of files without group metadata (default: the group objfuse-mount runs as; 0 in a mounter pod)"},
	{Param: ParamFileMode, Flag: "file-mode", Kind: Mode, Default: fmt.Sprintf("%04o", limits.DefaultFileMode), Usage: "permissions of files without mode metadata (octal)"},
	{Param: ParamDirMode, Flag: "dir-mode", Kind: Mode, Default: fmt.Sprintf("%04o", limits.DefaultDirMode), Usage: "permissions of directories without mode metadata (octal)"},
	{Param: ParamStatTTL, Flag: "stat-ttl", Kind: Duration, Default: limits.DefaultStatTTL.String(), Usage: "how long file attributes are cached"},
	{Param: ParamListTTL, Flag: "list-ttl", Kind: Duration, Default: limits.DefaultListTTL.String(), Usage: "how long directory listings answer lookups"},
	{Param: ParamAsyncClose, Flag: "async-close", Kind: Bool, Default: "false",
		Usage: "return from close(2) once the file is in the journal on the staging directory, before the upload completes (fsync still waits; failures surface on the next close/fsync and in metrics)"},
	{Param: ParamWritebackCache, Flag: "writeback-cache", Kind: Bool, Default: "false",
		Usage: "let the kernel gather small writes in its page cache and send them large (4 KiB writes about as fast as 1 MiB ones); a version another client writes gets a new inode at its next lookup, and a write past the volume's capacity fails at close or fsync rather than at the write"},
	{Param: ParamBatchSmallUploads, Flag: "no-batching", Kind: Bool, Default: "true", Negated: true,
		Usage: "on MinIO too, upload every small file in a request of its own (by default, small files uploaded at the same time go in one request that MinIO extracts)"},
	{Param: ParamTakeover, Flag: "no-takeover", Kind: Bool, Default: "true", Negated: true,
		Usage: "in a mounter pod, keep nothing for a successor: the FUSE connection dies with this process and is mounted again (by default, a restarted mounter takes the connection over from state kept in the staging directory, and the mount's users see a pause, not an error)"},
	{Param: ParamPartSizeMiB, Flag: "part-size-mib", Kind: Whole, Min: 5, Max: 5120, Default: strconv.Itoa(limits.DefaultPartSize >> 20), Usage: "multipart part size in MiB"},
	{Param: ParamConcurrency, Flag: "concurrency", Kind: Whole, Min: 1, Max: 64, Default: strconv.Itoa(limits.DefaultConcurrency), Usage: "parallel part uploads and readahead requests per file"},
	{Param: ParamMemoryLimitMiB, Flag: "memory-limit-mib", Kind: Whole, Min: 16, Max: 65536, Default: strconv.Itoa(limits.DefaultMemoryLimit >> 20),
		Usage: "bound on memory for written data not yet uploaded and for readahead, in MiB (beyond it, writes wait for uploads or go to staging files)"},
	{Param: ParamReadCacheMiB, Flag: "read-cache-mib", Kind: Whole, Min: 0, Max: 1 << 20, Default: strconv.Itoa(limits.DefaultReadCacheMiB),
		Usage: "keep up to this many MiB of randomly read ranges in a local file (the staging directory), keyed by object version, so reading them again needs no GET (0: no cache; a mounter pod with less than 2 GiB of staging space gets a quarter of it by default)"},
	{Param: ParamCapacityBytes, Flag: "capacity", Kind: Whole, Min: 0, Max: 1 << 62, Default: "0",
		Usage: "the volume's size in bytes, enforced: a write past it fails with ENOSPC and statfs shows it (0: no quota; a mounter pod gets its PVC's size, and a larger one recorded by an expansion)"},
}

// mountOption is the table's row for param.
func mountOption(param string) (MountOption, bool) {
	for _, o := range MountOptionTable {
		if o.Param == param {
			return o, true
		}
	}
	return MountOption{}, false
}

// Min is the least a Whole option param takes (0 for any other).
func (m MountOptions) Min(param string) int64 {
	o, _ := mountOption(param)
	return o.Min
}

// Parse checks v and returns it in canonical form, or a ParseError that
// says what the option takes.
func (o MountOption) Parse(v string) (string, error) {
	bad := func(reason string) error { return &ParseError{Param: o.Param, Value: v, Reason: reason} }
	switch o.Kind {
	case Bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return "", bad("want true or false")
		}
		return strconv.FormatBool(b), nil
	case Whole:
		i, err := strconv.ParseInt(v, 10, 64)
		if err != nil || i < o.Min || i > o.Max {
			return "", bad(fmt.Sprintf("want a whole number from %d to %d", o.Min, o.Max))
		}
		return strconv.FormatInt(i, 10), nil
	case Duration:
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > 24*time.Hour {
			return "", bad("want a duration between 0s and 24h, such as 1s")
		}
		return d.String(), nil
	case Mode:
		n, err := strconv.ParseUint(v, 8, 32)
		if err != nil || n > 0o777 {
			return "", bad("want octal permissions such as 0644")
		}
		return fmt.Sprintf("%04o", n), nil
	case Owner:
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return "", bad("want a numeric id such as 1000")
		}
		return strconv.FormatUint(n, 10), nil
	}
	return "", bad("unknown kind of option")
}

// MountOptions are the mount options a volume sets, by parameter, in
// canonical form; what is absent takes objfuse-mount's default.
type MountOptions map[string]string

// ParseMountOptions takes the mount options out of parameters (a
// StorageClass's, or a volume context), checking each against its row,
// and checks that they fit together.
func ParseMountOptions(in map[string]string) (MountOptions, error) {
	m := MountOptions{}
	for _, o := range MountOptionTable {
		v, ok := in[o.Param]
		if !ok {
			continue
		}
		c, err := o.Parse(v)
		if err != nil {
			return nil, err
		}
		m[o.Param] = c
	}
	if part, mem := m.Int(ParamPartSizeMiB), m.Int(ParamMemoryLimitMiB); mem < 2*part {
		return nil, &ParseError{Param: ParamPartSizeMiB, Value: strconv.FormatInt(part, 10), Reason: fmt.Sprintf("%s (%d) must hold at least two parts", ParamMemoryLimitMiB, mem)}
	}
	if m.Bool(ParamWritebackCache) && m.Bool(ParamTakeover) {
		// A successor revives the kernel's inodes by looking their names
		// up again, and could not tell a cached inode (whose size the
		// kernel keeps under the writeback cache) from a newer version.
		return nil, &ParseError{Param: ParamWritebackCache, Value: "true", Reason: fmt.Sprintf("needs %s: \"false\" (a restarted mounter cannot take over a connection whose kernel keeps its own file sizes; the volume is mounted again instead)", ParamTakeover)}
	}
	return m, nil
}

// value is param's value, else its default.
func (m MountOptions) value(param string) string {
	if v, ok := m[param]; ok {
		return v
	}
	o, _ := mountOption(param)
	return o.Default
}

// Bool is a Bool option's value.
func (m MountOptions) Bool(param string) bool {
	b, _ := strconv.ParseBool(m.value(param))
	return b
}

// Int is a Whole option's value.
func (m MountOptions) Int(param string) int64 {
	i, _ := strconv.ParseInt(m.value(param), 10, 64)
	return i
}

// Duration is a Duration option's value.
func (m MountOptions) Duration(param string) time.Duration {
	d, _ := time.ParseDuration(m.value(param))
	return d
}

// Mode is a Mode option's value.
func (m MountOptions) Mode(param string) uint32 {
	n, _ := strconv.ParseUint(m.value(param), 8, 32)
	return uint32(n)
}

// Owner is an Owner option's value, if the volume sets it.
func (m MountOptions) Owner(param string) (uint32, bool) {
	v, ok := m[param]
	n, _ := strconv.ParseUint(v, 10, 32)
	return uint32(n), ok
}

// Args are the objfuse-mount flags that carry the options set, in the
// table's order.
func (m MountOptions) Args() []string {
	var args []string
	for _, o := range MountOptionTable {
		v, ok := m[o.Param]
		switch {
		case !ok:
		case o.Kind == Bool && o.Negated:
			if v == "false" {
				args = append(args, "--"+o.Flag)
			}
		case o.Kind == Bool:
			if v == "true" {
				args = append(args, "--"+o.Flag)
			}
		default:
			args = append(args, "--"+o.Flag+"="+v)
		}
	}
	return args
}
