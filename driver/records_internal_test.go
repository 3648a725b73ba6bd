package driver

import (
	"testing"

	"github.com/objfuse/objfuse/volume"
)

// The record's keys are those CreateVolume writes and mounters read
// (volume.TagCapacity, volume.MetaCapacity): an expansion is seen.
func TestRecordKeysAreTheVolumes(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{factKey(false, factCapacity), volume.TagCapacity},
		{factKey(true, factCapacity), volume.MetaCapacity},
		{factKey(false, factVolume), tagVolume},
		{factKey(true, factVolume), metaVolume},
	} {
		if c.got != c.want {
			t.Errorf("record key %q, want %q", c.got, c.want)
		}
	}
}
