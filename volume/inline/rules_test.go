package inline_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/objfuse/objfuse/volume"
	"github.com/objfuse/objfuse/volume/inline"
)

const allowList = `
- namespace: team-a
  endpoint: http://minio.example:9000
  bucket: team-a-data
- namespace: team-b
  endpoint: https://s3.example.com
  bucket: shared
  prefix: team-b
`

func id(endpoint, bucket, prefix string) volume.ID {
	return volume.ID{S3: volume.S3{Endpoint: endpoint, Region: "us-east-1"}, Bucket: bucket, Prefix: prefix}
}

func TestRulesAllowOnlyWhatTheyName(t *testing.T) {
	rs, err := inline.Parse([]byte(allowList))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		ns   string
		id   volume.ID
		want bool
	}{
		{"team-a", id("http://minio.example:9000", "team-a-data", ""), true},
		{"team-a", id("http://minio.example:9000/", "team-a-data", "x/y/"), true},
		{"team-a", id("http://minio.example:9000", "team-b-data", ""), false},
		{"team-a", id("http://evil.example:9000", "team-a-data", ""), false},
		{"team-b", id("https://s3.example.com", "shared", "team-b/"), true},
		{"team-b", id("https://s3.example.com", "shared", "team-b/sub/"), true},
		{"team-b", id("https://s3.example.com", "shared", "team-bx/"), false},
		{"team-b", id("https://s3.example.com", "shared", ""), false},
		{"team-c", id("http://minio.example:9000", "team-a-data", ""), false},
	}
	for _, c := range cases {
		err := rs.Allows(c.ns, c.id)
		if (err == nil) != c.want {
			t.Errorf("Allows(%s, %s/%s at %s) = %v, want allowed=%v", c.ns, c.id.Bucket, c.id.Prefix, c.id.S3.Endpoint, err, c.want)
		}
		if err != nil && !errors.Is(err, inline.ErrNotAllowed) {
			t.Errorf("Allows(%s): %v is not ErrNotAllowed", c.ns, err)
		}
	}
	// The refusal tells a namespace without rules where the admin allows
	// it, and one with rules what they allow.
	if err := rs.Allows("team-c", id("http://minio.example:9000", "x-bucket", "")); !strings.Contains(err.Error(), "inline.allow") {
		t.Errorf("refusal of an unlisted namespace: %v", err)
	}
	if err := rs.Allows("team-b", id("https://s3.example.com", "shared", "")); !strings.Contains(err.Error(), `under prefix "team-b/"`) {
		t.Errorf("refusal of a listed namespace: %v", err)
	}
	if got := rs.Namespaces(); strings.Join(got, ",") != "team-a,team-b" {
		t.Errorf("Namespaces() = %v", got)
	}
	more, err := inline.Parse([]byte(allowList + "- {namespace: team-b, endpoint: 'https://s3.example.com', bucket: other, maxMounters: 40}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[string]int{"team-a": inline.DefaultMaxMounters, "team-b": 40, "team-c": 0} {
		if got := more.MountersFor(ns); got != want {
			t.Errorf("MountersFor(%s) = %d, want %d", ns, got, want)
		}
	}
}

func TestBadRulesAreRefused(t *testing.T) {
	for _, bad := range []string{
		"- namespace: Team\n  endpoint: http://h:9000\n  bucket: bkt-1",
		"- namespace: a\n  endpoint: ftp://h\n  bucket: bkt-1",
		"- namespace: a\n  endpoint: http://h:9000\n  bucket: B",
		"- namespace: a\n  endpoint: http://h:9000\n  bucket: bkt-1\n  prefix: ../x",
		"- namespace: a\n  endpoint: http://h:9000\n  bucket: bkt-1\n  buckets: [x]",
		"namespace: a",
		"- namespace: a\n  endpoint: http://h:9000\n  bucket: bkt-1\n  maxMounters: -1",
	} {
		if _, err := inline.Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) took it", bad)
		}
	}
	if rs, err := inline.Load(t.TempDir() + "/missing.yaml"); err != nil || len(rs) != 0 {
		t.Errorf("Load of a missing file = %v, %v; want no rules", rs, err)
	}
}

func TestAnInlineVolumeMayNotChooseItsMounter(t *testing.T) {
	base := map[string]string{volume.ParamBucket: "bkt-1", volume.ParamEndpoint: "http://h:9000"}
	v, err := inline.Volume("csi-x", base)
	if err != nil || v.Bucket != "bkt-1" {
		t.Fatalf("Volume(%v) = %+v, %v", base, v, err)
	}
	for _, k := range []string{volume.ParamMounterNamespace, volume.ParamMounterMemoryLimit, volume.ParamMounterCPURequest} {
		attrs := map[string]string{k: "x"}
		for kk, vv := range base {
			attrs[kk] = vv
		}
		if _, err := inline.Volume("csi-x", attrs); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("Volume with %s: %v", k, err)
		}
	}
	if _, err := inline.Volume("csi-x", map[string]string{volume.ParamEndpoint: "http://h:9000"}); err == nil {
		t.Error("Volume without a bucket was taken")
	}
	if _, err := inline.Volume("csi-x", map[string]string{volume.ParamBucket: "bkt-1"}); err == nil {
		t.Error("Volume without an endpoint was taken")
	}
	if h := inline.Handle("uid-1", "data"); h != inline.Handle("uid-1", "data") || h == inline.Handle("uid-2", "data") || !strings.HasPrefix(h, "csi-") {
		t.Errorf("Handle = %q", h)
	}
}

// Whatever the file says, Parse refuses it or returns rules that allow
// nothing outside their own bucket and prefix, never a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(allowList))
	f.Add([]byte("- namespace: a\n  endpoint: http://h\n  bucket: bkt\n  prefix: a/../b"))
	f.Add([]byte("[]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := inline.Parse(data)
		if err != nil {
			return
		}
		for _, r := range rs {
			if strings.Contains(r.Prefix, "..") && strings.Contains("/"+r.Prefix, "/../") {
				t.Fatalf("rule kept prefix %q", r.Prefix)
			}
			one := inline.Rules{r}
			if one.Allows(r.Namespace, id(r.Endpoint, r.Bucket, r.Prefix)) != nil {
				t.Fatalf("rule %+v refuses its own volume", r)
			}
			if one.Allows(r.Namespace, id(r.Endpoint, r.Bucket+"x", r.Prefix)) == nil || one.Allows(r.Namespace+"x", id(r.Endpoint, r.Bucket, r.Prefix)) == nil {
				t.Fatalf("rule %+v allows another bucket or namespace", r)
			}
		}
	})
}
