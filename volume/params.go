// Package volume is objfuse's model of a volume: the StorageClass
// parameters it is made from, the volume id that names it, and the
// volume context the node receives. Everything here is pure and
// validated, so that a user's mistake is caught with a message naming it
// before any request reaches S3.
package volume

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Parameter names, the same in a StorageClass's parameters, a static PV's
// volumeAttributes and the volume context the driver passes on.
const (
	ParamEndpoint  = "endpoint"
	ParamRegion    = "region"
	ParamPathStyle = "pathStyle"
	// ParamBucket in a StorageClass names a shared bucket: each volume is
	// a prefix in it. In a volume context it is the volume's bucket.
	ParamBucket = "bucket"
	// ParamPrefix in a StorageClass is where volume prefixes go inside the
	// shared bucket; in a volume context it is the volume's own prefix.
	ParamPrefix = "prefix"

	ParamUID        = "uid"
	ParamGID        = "gid"
	ParamFileMode   = "fileMode"
	ParamDirMode    = "dirMode"
	ParamStatTTL    = "statTTL"
	ParamListTTL    = "listTTL"
	ParamAsyncClose = "asyncClose"
	// ParamBatchSmallUploads "false" sends every small file alone, also
	// to MinIO (objfuse-mount --no-batching).
	ParamBatchSmallUploads = "batchSmallUploads"
	ParamPartSizeMiB       = "partSizeMiB"
	ParamConcurrency       = "concurrency"
	ParamMemoryLimitMiB    = "memoryLimitMiB"
	// ParamReadCacheMiB turns on the mounter's local cache of randomly
	// read ranges, in its staging emptyDir (whose size limit must allow it).
	ParamReadCacheMiB = "readCacheMiB"

	// Mounter pod resources, overriding the driver's mounter template.
	ParamMounterMemoryLimit = "mounterMemoryLimit"
	ParamMounterCPURequest  = "mounterCPURequest"
)

// reserved reports keys that Kubernetes and its sidecars add or consume
// (secret references, PVC name and namespace, the provisioner's identity
// in a volume context); they are not ours to check.
func reserved(key string) bool {
	return strings.HasPrefix(key, "csi.storage.k8s.io/") || strings.HasPrefix(key, "storage.kubernetes.io/")
}

// DefaultRegion is used when neither the StorageClass nor the driver says.
const DefaultRegion = "us-east-1"

// Params are a StorageClass's validated parameters.
type Params struct {
	S3 S3
	// SharedBucket, when set, makes each volume a prefix in this bucket.
	SharedBucket string
	// BasePrefix is where volume prefixes go in SharedBucket ("" for the top).
	BasePrefix string
	Mount      MountOptions
	Mounter    MounterResources
}

// S3 says where a volume's bucket lives.
type S3 struct {
	Endpoint  string
	Region    string
	PathStyle bool
}

// MountOptions tune the FUSE filesystem; zero values keep objfuse-mount's defaults.
type MountOptions struct {
	UID, GID          *uint32
	FileMode, DirMode string // octal, as objfuse-mount takes them
	StatTTL, ListTTL  time.Duration
	AsyncClose        bool
	NoBatching        bool
	PartSizeMiB       int
	Concurrency       int
	MemoryLimitMiB    int
	ReadCacheMiB      int
}

// MounterResources override the mounter pod template's resources.
type MounterResources struct {
	MemoryLimit string // a Kubernetes quantity, e.g. "512Mi"
	CPURequest  string
}

// Defaults are the driver's own settings a StorageClass may leave out.
type Defaults struct {
	Endpoint  string
	Region    string
	PathStyle bool
}

// ParseError names the parameter that is wrong and why.
type ParseError struct {
	Param, Value, Reason string
}

func (e *ParseError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("parameter %q: %s", e.Param, e.Reason)
	}
	return fmt.Sprintf("parameter %q=%q: %s", e.Param, e.Value, e.Reason)
}

// known are the parameters a StorageClass may set.
var known = map[string]bool{
	ParamEndpoint: true, ParamRegion: true, ParamPathStyle: true, ParamBucket: true, ParamPrefix: true,
	ParamUID: true, ParamGID: true, ParamFileMode: true, ParamDirMode: true, ParamStatTTL: true,
	ParamListTTL: true, ParamAsyncClose: true, ParamBatchSmallUploads: true, ParamPartSizeMiB: true, ParamConcurrency: true,
	ParamMemoryLimitMiB: true, ParamReadCacheMiB: true, ParamMounterMemoryLimit: true, ParamMounterCPURequest: true,
}

// KnownParams lists the parameters a StorageClass may set, for messages.
func KnownParams() []string {
	out := make([]string, 0, len(known))
	for k := range known {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ParseParams validates a StorageClass's parameters. The first mistake is
// returned as a *ParseError.
func ParseParams(in map[string]string, def Defaults) (Params, error) {
	for _, k := range sortedKeys(in) {
		if !known[k] && !reserved(k) {
			return Params{}, &ParseError{Param: k, Reason: "unknown parameter; objfuse knows " + strings.Join(KnownParams(), ", ")}
		}
	}
	var p Params
	var err error
	if p.S3, err = parseS3(in, def); err != nil {
		return Params{}, err
	}
	if b, ok := in[ParamBucket]; ok {
		if err := ValidateBucketName(b); err != nil {
			return Params{}, &ParseError{Param: ParamBucket, Value: b, Reason: err.Error()}
		}
		p.SharedBucket = b
	}
	if pre, ok := in[ParamPrefix]; ok {
		if p.SharedBucket == "" {
			return Params{}, &ParseError{Param: ParamPrefix, Value: pre, Reason: "only means something with parameter \"bucket\" (a shared bucket)"}
		}
		clean, err := CleanPrefix(pre)
		if err != nil {
			return Params{}, &ParseError{Param: ParamPrefix, Value: pre, Reason: err.Error()}
		}
		p.BasePrefix = clean
	}
	if p.Mount, err = parseMount(in); err != nil {
		return Params{}, err
	}
	p.Mounter = MounterResources{MemoryLimit: in[ParamMounterMemoryLimit], CPURequest: in[ParamMounterCPURequest]}
	if err := validateQuantity(ParamMounterMemoryLimit, p.Mounter.MemoryLimit); err != nil {
		return Params{}, err
	}
	if err := validateQuantity(ParamMounterCPURequest, p.Mounter.CPURequest); err != nil {
		return Params{}, err
	}
	return p, nil
}

func parseS3(in map[string]string, def Defaults) (S3, error) {
	s := S3{Endpoint: def.Endpoint, Region: def.Region, PathStyle: def.PathStyle}
	if v, ok := in[ParamEndpoint]; ok {
		s.Endpoint = v
	}
	if s.Endpoint == "" {
		return S3{}, &ParseError{Param: ParamEndpoint, Reason: "no S3 endpoint: set it in the StorageClass (e.g. https://s3.amazonaws.com) or start the driver with --s3-endpoint"}
	}
	if err := validateEndpoint(s.Endpoint); err != nil {
		return S3{}, &ParseError{Param: ParamEndpoint, Value: s.Endpoint, Reason: err.Error()}
	}
	if v, ok := in[ParamRegion]; ok {
		if !validRegion(v) {
			return S3{}, &ParseError{Param: ParamRegion, Value: v, Reason: "want a region name such as us-east-1"}
		}
		s.Region = v
	}
	if s.Region == "" {
		s.Region = DefaultRegion
	}
	if v, ok := in[ParamPathStyle]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return S3{}, &ParseError{Param: ParamPathStyle, Value: v, Reason: "want true or false"}
		}
		s.PathStyle = b
	}
	return s, nil
}

func validateEndpoint(ep string) error {
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want an http:// or https:// URL such as https://s3.amazonaws.com")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil || strings.Contains(ep, "|") {
		return fmt.Errorf("want scheme://host[:port] with no path, query or user")
	}
	return nil
}

func parseMount(in map[string]string) (MountOptions, error) {
	var m MountOptions
	for _, id := range []struct {
		name string
		dst  **uint32
	}{{ParamUID, &m.UID}, {ParamGID, &m.GID}} {
		if v, ok := in[id.name]; ok {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return m, &ParseError{Param: id.name, Value: v, Reason: "want a numeric id such as 1000"}
			}
			u := uint32(n)
			*id.dst = &u
		}
	}
	for _, mode := range []struct {
		name string
		dst  *string
	}{{ParamFileMode, &m.FileMode}, {ParamDirMode, &m.DirMode}} {
		if v, ok := in[mode.name]; ok {
			n, err := strconv.ParseUint(v, 8, 32)
			if err != nil || n > 0o777 {
				return m, &ParseError{Param: mode.name, Value: v, Reason: "want octal permissions such as 0644"}
			}
			*mode.dst = fmt.Sprintf("%04o", n)
		}
	}
	for _, ttl := range []struct {
		name string
		dst  *time.Duration
	}{{ParamStatTTL, &m.StatTTL}, {ParamListTTL, &m.ListTTL}} {
		if v, ok := in[ttl.name]; ok {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > 24*time.Hour {
				return m, &ParseError{Param: ttl.name, Value: v, Reason: "want a duration between 0s and 24h, such as 1s"}
			}
			*ttl.dst = d
		}
	}
	if v, ok := in[ParamAsyncClose]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return m, &ParseError{Param: ParamAsyncClose, Value: v, Reason: "want true or false"}
		}
		m.AsyncClose = b
	}
	if v, ok := in[ParamBatchSmallUploads]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return m, &ParseError{Param: ParamBatchSmallUploads, Value: v, Reason: "want true or false"}
		}
		m.NoBatching = !b
	}
	for _, n := range []struct {
		name     string
		dst      *int
		min, max int
	}{{ParamPartSizeMiB, &m.PartSizeMiB, 5, 5120}, {ParamConcurrency, &m.Concurrency, 1, 64}, {ParamMemoryLimitMiB, &m.MemoryLimitMiB, 16, 65536}, {ParamReadCacheMiB, &m.ReadCacheMiB, 1, 1 << 20}} {
		if v, ok := in[n.name]; ok {
			i, err := strconv.Atoi(v)
			if err != nil || i < n.min || i > n.max {
				return m, &ParseError{Param: n.name, Value: v, Reason: fmt.Sprintf("want a whole number from %d to %d", n.min, n.max)}
			}
			*n.dst = i
		}
	}
	// objfuse-mount's defaults: 8 MiB parts, 64 MiB of buffers.
	part, mem := or(m.PartSizeMiB, 8), or(m.MemoryLimitMiB, 64)
	if mem < 2*part {
		return m, &ParseError{Param: ParamPartSizeMiB, Value: strconv.Itoa(part), Reason: fmt.Sprintf("memoryLimitMiB (%d) must hold at least two parts", mem)}
	}
	return m, nil
}

func or(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Map renders options back to parameters, for a volume context.
func (m MountOptions) Map() map[string]string {
	out := map[string]string{}
	if m.UID != nil {
		out[ParamUID] = strconv.FormatUint(uint64(*m.UID), 10)
	}
	if m.GID != nil {
		out[ParamGID] = strconv.FormatUint(uint64(*m.GID), 10)
	}
	if m.FileMode != "" {
		out[ParamFileMode] = m.FileMode
	}
	if m.DirMode != "" {
		out[ParamDirMode] = m.DirMode
	}
	if m.StatTTL != 0 {
		out[ParamStatTTL] = m.StatTTL.String()
	}
	if m.ListTTL != 0 {
		out[ParamListTTL] = m.ListTTL.String()
	}
	if m.AsyncClose {
		out[ParamAsyncClose] = "true"
	}
	if m.NoBatching {
		out[ParamBatchSmallUploads] = "false"
	}
	if m.PartSizeMiB != 0 {
		out[ParamPartSizeMiB] = strconv.Itoa(m.PartSizeMiB)
	}
	if m.Concurrency != 0 {
		out[ParamConcurrency] = strconv.Itoa(m.Concurrency)
	}
	if m.MemoryLimitMiB != 0 {
		out[ParamMemoryLimitMiB] = strconv.Itoa(m.MemoryLimitMiB)
	}
	if m.ReadCacheMiB != 0 {
		out[ParamReadCacheMiB] = strconv.Itoa(m.ReadCacheMiB)
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// validRegion reports whether v can be a region name (and a field of an
// id: no '|').
func validRegion(v string) bool { return v != "" && !strings.ContainsAny(v, "|/ ") }
