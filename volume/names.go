package volume

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

var bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)

// ValidateBucketName applies S3's rules for bucket names, without dots
// (dotted names break virtual-host TLS), so the mistake is caught here.
func ValidateBucketName(b string) error {
	switch {
	case len(b) < 3 || len(b) > 63:
		return fmt.Errorf("bucket names are 3 to 63 characters long")
	case !bucketRE.MatchString(b):
		return fmt.Errorf("bucket names use lowercase letters, digits and hyphens, and start and end with a letter or digit")
	case strings.Contains(b, "--"), strings.HasPrefix(b, "xn--"), strings.HasSuffix(b, "-s3alias"):
		return fmt.Errorf("bucket names may not contain \"--\" or use the reserved xn-- and -s3alias forms")
	case net.ParseIP(b) != nil:
		return fmt.Errorf("bucket names may not look like an IP address")
	}
	return nil
}

// BucketFor is the bucket a volume named name gets, the same every time:
// the name itself when it is a valid bucket name (Kubernetes' pvc-<uuid>
// is), otherwise a cleaned-up prefix of it and a hash of the whole name.
func BucketFor(name string) string {
	if ValidateBucketName(name) == nil {
		return name
	}
	return cleaned(strings.ToLower(name), 46, func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
	}) + "-" + hash(name)
}

// PrefixFor is the prefix a volume named name gets under base in a shared
// bucket: "base/name/", with name cleaned and hashed as for buckets when it
// is not a plain path segment.
func PrefixFor(base, name string) string {
	seg := name
	if !segmentRE.MatchString(name) || name == "." || name == ".." {
		seg = cleaned(name, 46, func(r rune) bool {
			return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_'
		}) + "-" + hash(name)
	}
	return base + seg + "/"
}

var segmentRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// CleanPrefix checks a user-given prefix and returns it as "a/b/" (or ""
// for none). Segments are plain names: no "." or "..", nothing empty, so a
// prefix can never reach outside its place in the bucket.
func CleanPrefix(p string) (string, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return "", nil
	}
	if len(p) > 512 {
		return "", fmt.Errorf("at most 512 characters")
	}
	for _, seg := range strings.Split(p, "/") {
		if !segmentRE.MatchString(seg) || seg == "." || seg == ".." {
			return "", fmt.Errorf("segment %q: want letters, digits, '.', '_' or '-' (not \".\" or \"..\", no empty segments)", seg)
		}
	}
	return p + "/", nil
}

// cleaned keeps runs of allowed characters joined by single hyphens, at most max long.
func cleaned(s string, max int, allowed func(rune) bool) string {
	var b strings.Builder
	dash := false
	for _, r := range s {
		if allowed(r) {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= max {
			break
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		out = "objfuse"
	}
	return out
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// Key is a short, path-safe name for a volume (or a volume on a node), for
// directories and pod names: a hash, so it can never escape its root.
func Key(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:8])
}

func validateQuantity(param, v string) error {
	if v == "" {
		return nil
	}
	if _, err := resource.ParseQuantity(v); err != nil {
		return &ParseError{Param: param, Value: v, Reason: "want a Kubernetes quantity such as 512Mi or 100m"}
	}
	return nil
}

// Where CreateVolume records a volume's size, and ControllerExpandVolume
// a new one, for mounters to read: a tag on the volume's bucket, or user
// metadata on its marker object in a shared bucket (as the S3 API names
// it; the store's Head gives it lower-case).
const (
	TagCapacity  = "objfuse.csi.io/capacity"
	MetaCapacity = "Objfuse-Capacity"
)

// SnapshotPrefixFor is where a snapshot named name of the volume at
// prefix (in a shared bucket) goes: beside the volumes, under
// .objfuse-snapshots/ in the same base prefix, out of every volume's
// reach. A snapshot of a volume with a bucket of its own gets a bucket of
// its own (BucketFor).
func SnapshotPrefixFor(volumePrefix, name string) string {
	return PrefixFor(SnapshotsUnder(BaseOf(volumePrefix)), name)
}

// BaseOf is the base prefix of the volume at prefix: where it and its
// neighbours are ("" at the bucket's root).
func BaseOf(volumePrefix string) string {
	if i := strings.LastIndex(strings.TrimSuffix(volumePrefix, "/"), "/"); i >= 0 {
		return volumePrefix[:i+1]
	}
	return ""
}

// SnapshotsUnder is the folder that holds the snapshots of the volumes
// under base.
func SnapshotsUnder(base string) string { return base + ".objfuse-snapshots/" }

// SnapshotBases is the index, at a shared bucket's root, of the other
// bases whose volumes have snapshots: an empty object SnapshotBases+base
// for each, so that a listing of every snapshot finds them without
// walking the bucket. No snapshot's folder is named "@bases": PrefixFor
// rewrites a name with "@".
var SnapshotBases = SnapshotsUnder("") + "@bases/"
