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

	"k8s.io/apimachinery/pkg/util/validation"
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
	// ParamWritebackCache "true" has the kernel gather small writes in
	// its page cache (objfuse-mount --writeback-cache).
	ParamWritebackCache = "writebackCache"
	// ParamBatchSmallUploads "false" sends every small file alone, also
	// to MinIO (objfuse-mount --no-batching).
	ParamBatchSmallUploads = "batchSmallUploads"
	// ParamTakeover "false" lets a volume's FUSE connection die with its
	// mounter, to be mounted again (the repair of kernels before 6.9)
	// instead of taken over by the restarted mounter.
	ParamTakeover       = "takeover"
	ParamPartSizeMiB    = "partSizeMiB"
	ParamConcurrency    = "concurrency"
	ParamMemoryLimitMiB = "memoryLimitMiB"
	// ParamReadCacheMiB turns on the mounter's local cache of randomly
	// read ranges, in its staging emptyDir (whose size limit must allow it).
	ParamReadCacheMiB = "readCacheMiB"
	// ParamCapacityBytes in a volume context is the volume's size, which
	// the mounter enforces as a quota (ENOSPC beyond it, statfs shows
	// it): CreateVolume writes the PVC's request there; a static PV may
	// set it. An expansion records the new size on the bucket or marker
	// (TagCapacity, MetaCapacity), where mounters read it.
	ParamCapacityBytes = "capacityBytes"
	// ParamEnforceCapacity "false" in a StorageClass records a volume's
	// size without enforcing it (S3 itself has no size).
	ParamEnforceCapacity = "enforceCapacity"

	// Mounter pod resources, overriding the driver's mounter template.
	ParamMounterMemoryLimit = "mounterMemoryLimit"
	ParamMounterCPURequest  = "mounterCPURequest"
	// ParamMounterNamespace is where a volume's mounter pods run. In a
	// StorageClass: MounterNamespaceDriver (the default) or
	// MounterNamespacePVC. In a volume context: the namespace itself
	// (CreateVolume writes it there; absent, the driver's).
	ParamMounterNamespace = "mounterNamespace"
)

// Values of ParamMounterNamespace in a StorageClass.
const (
	MounterNamespaceDriver = "driver"
	// MounterNamespacePVC runs the mounters in the PVC's namespace, so
	// that its ResourceQuota and LimitRange count them; the driver's
	// admin lists the namespaces that may (objfuse-csi --pvc-namespaces).
	MounterNamespacePVC = "pvc"
)

// ParamPVCNamespace is the PVC's namespace in CreateVolume's parameters,
// which csi-provisioner adds with --extra-create-metadata.
const ParamPVCNamespace = "csi.storage.k8s.io/pvc/namespace"

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
	// EnforceCapacity: the volume's size is a quota (ParamCapacityBytes).
	EnforceCapacity bool
}

// S3 says where a volume's bucket lives.
type S3 struct {
	Endpoint  string
	Region    string
	PathStyle bool
}

// MounterResources override the mounter pod template's resources and
// say where the pods run.
type MounterResources struct {
	MemoryLimit string // a Kubernetes quantity, e.g. "512Mi"
	CPURequest  string
	// Namespace is where the volume's mounter pods run: "" for the
	// driver's. A StorageClass's value (pvc or driver) until
	// ResolveMounterNamespace makes it a namespace.
	Namespace string
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

// known are the parameters a StorageClass may set: where the volume is,
// the mount options (MountOptionTable) and the mounter pod's resources.
var known = func() map[string]bool {
	k := map[string]bool{
		ParamEndpoint: true, ParamRegion: true, ParamPathStyle: true, ParamBucket: true, ParamPrefix: true,
		ParamMounterMemoryLimit: true, ParamMounterCPURequest: true, ParamMounterNamespace: true,
		ParamEnforceCapacity: true,
	}
	for _, o := range MountOptionTable {
		k[o.Param] = true
	}
	return k
}()

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
	if p.Mount, err = ParseMountOptions(in); err != nil {
		return Params{}, err
	}
	p.EnforceCapacity = true
	if v, ok := in[ParamEnforceCapacity]; ok {
		if p.EnforceCapacity, err = strconv.ParseBool(v); err != nil {
			return Params{}, &ParseError{Param: ParamEnforceCapacity, Value: v, Reason: "want true (the PVC's size is a quota) or false (recorded only)"}
		}
	}
	p.Mounter = MounterResources{MemoryLimit: in[ParamMounterMemoryLimit], CPURequest: in[ParamMounterCPURequest], Namespace: in[ParamMounterNamespace]}
	if ns := p.Mounter.Namespace; ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return Params{}, &ParseError{Param: ParamMounterNamespace, Value: ns, Reason: strings.Join(errs, "; ")}
		}
	}
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

// Map renders options back to parameters, for a volume context.
func (m MountOptions) Map() map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
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

// ResolveMounterNamespace turns a StorageClass's ParamMounterNamespace
// into the namespace a new volume's mounters run in ("" for the
// driver's), given the PVC's namespace (ParamPVCNamespace).
func (p *Params) ResolveMounterNamespace(pvcNamespace string) error {
	switch p.Mounter.Namespace {
	case "", MounterNamespaceDriver:
		p.Mounter.Namespace = ""
	case MounterNamespacePVC:
		if pvcNamespace == "" {
			return &ParseError{Param: ParamMounterNamespace, Value: MounterNamespacePVC,
				Reason: "the request does not say the PVC's namespace: run csi-provisioner with --extra-create-metadata"}
		}
		p.Mounter.Namespace = pvcNamespace
	default:
		return &ParseError{Param: ParamMounterNamespace, Value: p.Mounter.Namespace,
			Reason: "want " + MounterNamespacePVC + " (the PVC's namespace) or " + MounterNamespaceDriver + " (the driver's, the default)"}
	}
	return nil
}
