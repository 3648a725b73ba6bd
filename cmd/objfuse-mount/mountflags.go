package main

import (
	"errors"
	"os"
	"strconv"

	"github.com/objfuse/objfuse/mounter-pod/serve"
	"github.com/objfuse/objfuse/volume"
)

// mountFlag is the flag of one mount option (volume.MountOptionTable):
// it checks a value as a StorageClass's would be, into the options.
type mountFlag struct {
	opt  volume.MountOption
	into volume.MountOptions
}

func (f mountFlag) String() string {
	v, ok := f.into[f.opt.Param] // a nil map: the zero value flag.PrintDefaults makes
	if !ok {
		v = f.opt.Default
	}
	return asFlag(f.opt, v)
}

// asFlag is a parameter's value as the option's flag reads it: the
// opposite for a Negated one.
func asFlag(o volume.MountOption, v string) string {
	if o.Negated {
		b, _ := strconv.ParseBool(v)
		return strconv.FormatBool(!b)
	}
	return v
}

func (f mountFlag) Set(v string) error {
	if f.opt.Negated {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("want true or false")
		}
		v = strconv.FormatBool(!b)
	}
	c, err := f.opt.Parse(v)
	if pe := (*volume.ParseError)(nil); errors.As(err, &pe) {
		return errors.New(pe.Reason)
	}
	if err != nil {
		return err
	}
	f.into[f.opt.Param] = c
	return nil
}

// IsBoolFlag lets a Bool option be given without a value.
func (f mountFlag) IsBoolFlag() bool { return f.opt.Kind == volume.Bool }

// takeMountOptions sets the configuration from the mount options given,
// the rest from their defaults; files without owner metadata are the
// running user's unless --uid and --gid say otherwise.
func takeMountOptions(c *serve.Config, m volume.MountOptions) {
	uid, ok := m.Owner(volume.ParamUID)
	if !ok {
		uid = uint32(os.Getuid())
	}
	gid, ok := m.Owner(volume.ParamGID)
	if !ok {
		gid = uint32(os.Getgid())
	}
	c.FS.UID, c.FS.GID = uid, gid
	c.FS.FileMode = os.FileMode(m.Mode(volume.ParamFileMode))
	c.FS.DirMode = os.FileMode(m.Mode(volume.ParamDirMode))
	c.FS.StatTTL = m.Duration(volume.ParamStatTTL)
	c.FS.ListTTL = m.Duration(volume.ParamListTTL)
	c.FS.AsyncClose = m.Bool(volume.ParamAsyncClose)
	c.FS.WritebackCache = m.Bool(volume.ParamWritebackCache)
	c.S3.NoBatching = !m.Bool(volume.ParamBatchSmallUploads)
	c.Takeover = m.Bool(volume.ParamTakeover)
	c.FS.PartSize = int(m.Int(volume.ParamPartSizeMiB)) << 20
	c.FS.Concurrency = int(m.Int(volume.ParamConcurrency))
	c.FS.MemoryLimit = m.Int(volume.ParamMemoryLimitMiB) << 20
	c.FS.ReadCacheSize = m.Int(volume.ParamReadCacheMiB) << 20
	c.FS.Capacity = m.Int(volume.ParamCapacityBytes)
}
