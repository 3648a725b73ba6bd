package volume

import (
	"fmt"
	"strconv"
	"strings"
)

// ID is what a volume id names: where the volume's data is. A dynamically
// provisioned volume's id carries everything DeleteVolume needs, because
// DeleteVolume receives no StorageClass parameters.
type ID struct {
	S3     S3
	Bucket string
	// Prefix is "" for a whole bucket, else "a/b/".
	Prefix string
}

// idVersion starts every id this driver makes, so that ids of other
// drivers, and tokens that are not ids, are told apart.
const idVersion = "objfuse1"

// String encodes the id: "objfuse1|endpoint|region|path-style|bucket|prefix".
// '|' appears in none of the parts (all are validated).
func (id ID) String() string {
	return strings.Join([]string{idVersion, id.S3.Endpoint, id.S3.Region, strconv.FormatBool(id.S3.PathStyle), id.Bucket, id.Prefix}, "|")
}

// ParseID decodes an id made by String, checking every part.
func ParseID(s string) (ID, error) {
	parts := strings.Split(s, "|")
	if len(parts) != 6 || parts[0] != idVersion {
		return ID{}, fmt.Errorf("volume id %q was not made by objfuse", s)
	}
	// Only what String writes: one volume, one id.
	ps := parts[3] == "true"
	if !ps && parts[3] != "false" {
		return ID{}, fmt.Errorf("volume id %q: bad path-style field", s)
	}
	id := ID{S3: S3{Endpoint: parts[1], Region: parts[2], PathStyle: ps}, Bucket: parts[4], Prefix: parts[5]}
	if err := validateEndpoint(id.S3.Endpoint); err != nil {
		return ID{}, fmt.Errorf("volume id %q: endpoint: %v", s, err)
	}
	if !validRegion(id.S3.Region) {
		// String always writes one; its context could not carry none.
		return ID{}, fmt.Errorf("volume id %q: bad region", s)
	}
	if err := ValidateBucketName(id.Bucket); err != nil {
		return ID{}, fmt.Errorf("volume id %q: bucket: %v", s, err)
	}
	if clean, err := CleanPrefix(id.Prefix); err != nil || clean != id.Prefix {
		return ID{}, fmt.Errorf("volume id %q: bad prefix", s)
	}
	return id, nil
}

// Source is the volume as objfuse-mount takes it: "bucket[/prefix]".
func (id ID) Source() string {
	return strings.TrimSuffix(id.Bucket+"/"+id.Prefix, "/")
}
