package volume

import (
	"reflect"
	"strings"
	"testing"
)

// An id ParseID takes is one String makes again, byte for byte, and its
// prefix never climbs out of its bucket.
func FuzzParseID(f *testing.F) {
	f.Add("objfuse1|http://127.0.0.1:9000|us-east-1|true|bkt|")
	f.Add("objfuse1|https://s3.example.com|eu-west-1|false|shared|team/pvc-1/")
	f.Add("objfuse1|http://h|r|true|bkt|../x/")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			return
		}
		if id.String() != s {
			t.Fatalf("ParseID(%q).String() = %q", s, id.String())
		}
		for _, seg := range strings.Split(id.Prefix, "/") {
			if seg == ".." || seg == "." {
				t.Fatalf("ParseID(%q) took prefix %q", s, id.Prefix)
			}
		}
	})
}

// Any one StorageClass parameter is refused or taken, never a panic; the
// mount options taken render to a context that parses to the same.
func FuzzParseParams(f *testing.F) {
	for _, k := range KnownParams() {
		f.Add(k, "1")
	}
	f.Add(ParamStatTTL, "1m30s")
	f.Add(ParamFileMode, "0640")
	f.Add(ParamPrefix, "a/../b")
	f.Fuzz(func(t *testing.T, key, value string) {
		in := map[string]string{key: value}
		if key == ParamPrefix {
			in[ParamBucket] = "shared"
		}
		p, err := ParseParams(in, Defaults{Endpoint: "http://127.0.0.1:9000"})
		if err != nil {
			return
		}
		again, err := ParseMountOptions(p.Mount.Map())
		if err != nil || !reflect.DeepEqual(again, p.Mount) {
			t.Fatalf("%s=%q: mount options %+v render to %v, which parse to %+v (%v)", key, value, p.Mount, p.Mount.Map(), again, err)
		}
		for _, seg := range strings.Split(p.BasePrefix, "/") {
			if seg == ".." || seg == "." {
				t.Fatalf("%s=%q: prefix %q", key, value, p.BasePrefix)
			}
		}
	})
}

// A volume's attributes (a static PV's, written by hand) are refused or
// resolved, never a panic, and a resolved volume's own context resolves
// to the same volume.
func FuzzFromContext(f *testing.F) {
	f.Add("objfuse1|http://127.0.0.1:9000|us-east-1|true|bkt|", "", "", "")
	f.Add("static", "bkt", "a/b", "1")
	f.Fuzz(func(t *testing.T, volumeID, bucket, prefix, uid string) {
		ctx := map[string]string{ParamBucket: bucket, ParamPrefix: prefix, ParamUID: uid}
		v, err := FromContext(volumeID, ctx, Defaults{Endpoint: "http://127.0.0.1:9000"})
		if err != nil {
			return
		}
		again, err := FromContext(volumeID, v.Context(), Defaults{Endpoint: "http://127.0.0.1:9000"})
		if err != nil || !reflect.DeepEqual(again, v) {
			t.Fatalf("%+v resolves to %+v; its context %v to %+v (%v)", ctx, v, v.Context(), again, err)
		}
	})
}
