package volume

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestBucketFor(t *testing.T) {
	tests := []struct{ name, want string }{
		{"pvc-0f8c6f6e-3c1e-4a1b-9b8e-6d1f2a3b4c5d", "pvc-0f8c6f6e-3c1e-4a1b-9b8e-6d1f2a3b4c5d"},
		{"My_Volume", "my-volume-" + hash("My_Volume")},
		{"a", "a-" + hash("a")},
		{strings.Repeat("x", 100), strings.Repeat("x", 46) + "-" + hash(strings.Repeat("x", 100))},
		{"192.168.1.1", "192-168-1-1-" + hash("192.168.1.1")},
		{"___", "objfuse-" + hash("___")},
	}
	for _, tc := range tests {
		got := BucketFor(tc.name)
		if got != tc.want {
			t.Errorf("BucketFor(%q) = %q, want %q", tc.name, got, tc.want)
		}
		if err := ValidateBucketName(got); err != nil {
			t.Errorf("BucketFor(%q) = %q is not a valid bucket: %v", tc.name, got, err)
		}
	}
}

func TestPrefixes(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{"", "", false},
		{"volumes", "volumes/", false},
		{"/a/b/", "a/b/", false},
		{"../x", "", true},
		{"a/./b", "", true},
		{"a//b", "", true},
		{"a b", "", true},
		{strings.Repeat("s", 129), "", true},
	}
	for _, tc := range tests {
		got, err := CleanPrefix(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("CleanPrefix(%q) = %q, %v; want %q (bad=%v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
	if got := PrefixFor("volumes/", "pvc-1"); got != "volumes/pvc-1/" {
		t.Errorf("PrefixFor = %q", got)
	}
	if got := PrefixFor("", ".."); strings.Contains(got, "../") || got == "../" {
		t.Errorf("PrefixFor(..) = %q escapes", got)
	}
}

func TestParseParams(t *testing.T) {
	def := Defaults{Endpoint: "http://minio:9000"}
	tests := []struct {
		name   string
		in     map[string]string
		param  string // the parameter the error names; "" for success
		shared string
	}{
		{"defaults", nil, "", ""},
		{"sidecar keys ignored", map[string]string{"csi.storage.k8s.io/pvc/name": "x"}, "", ""},
		{"shared bucket with prefix", map[string]string{"bucket": "shared", "prefix": "vols"}, "", "shared"},
		{"unknown", map[string]string{"endpoit": "x"}, "endpoit", ""},
		{"prefix without bucket", map[string]string{"prefix": "x"}, "prefix", ""},
		{"endpoint with path", map[string]string{"endpoint": "http://h/p"}, "endpoint", ""},
		{"bad ttl", map[string]string{"statTTL": "forever"}, "statTTL", ""},
		{"bad uid", map[string]string{"uid": "-1"}, "uid", ""},
		{"bad quantity", map[string]string{"mounterMemoryLimit": "lots"}, "mounterMemoryLimit", ""},
		{"concurrency too high", map[string]string{"concurrency": "1000"}, "concurrency", ""},
		{"read cache", map[string]string{"readCacheMiB": "512"}, "", ""},
		{"read cache off", map[string]string{"readCacheMiB": "0"}, "", ""},
		{"read cache negative", map[string]string{"readCacheMiB": "-1"}, "readCacheMiB", ""},
		{"read cache not a number", map[string]string{"readCacheMiB": "1Gi"}, "readCacheMiB", ""},
		{"batching off", map[string]string{"batchSmallUploads": "false"}, "", ""},
		{"batching neither on nor off", map[string]string{"batchSmallUploads": "sometimes"}, "batchSmallUploads", ""},
		{"writeback cache without takeover", map[string]string{"writebackCache": "true", "takeover": "false"}, "", ""},
		{"writeback cache with takeover", map[string]string{"writebackCache": "true"}, "writebackCache", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseParams(tc.in, def)
			var pe *ParseError
			switch {
			case tc.param == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.param != "" && (!errors.As(err, &pe) || pe.Param != tc.param):
				t.Fatalf("error %v, want one naming %q", err, tc.param)
			case tc.param == "" && p.SharedBucket != tc.shared:
				t.Fatalf("shared bucket %q, want %q", p.SharedBucket, tc.shared)
			}
		})
	}
	for v, off := range map[string]bool{"false": true, "true": false} {
		p, err := ParseParams(map[string]string{"batchSmallUploads": v}, def)
		noBatching := slices.Contains(p.Mount.Args(), "--no-batching")
		if err != nil || noBatching != off || (p.Mount.Map()["batchSmallUploads"] == "false") != off {
			t.Errorf("batchSmallUploads=%s: --no-batching %v, context %v (%v)", v, noBatching, p.Mount.Map(), err)
		}
	}
	wb, err := ParseParams(map[string]string{"writebackCache": "true", "takeover": "false"}, def)
	if args := wb.Mount.Args(); err != nil || !slices.Contains(args, "--writeback-cache") || !slices.Contains(args, "--no-takeover") {
		t.Errorf("writebackCache=true, takeover=false: mounter args %v (%v)", args, err)
	}
	if _, err := ParseParams(nil, Defaults{}); err == nil || !strings.Contains(err.Error(), "--s3-endpoint") {
		t.Errorf("no endpoint anywhere: %v", err)
	}
}

func TestIDRoundTrip(t *testing.T) {
	id := ID{S3: S3{Endpoint: "https://s3.amazonaws.com", Region: "eu-west-1", PathStyle: false}, Bucket: "shared", Prefix: "vols/pvc-1/"}
	got, err := ParseID(id.String())
	if err != nil || got != id {
		t.Fatalf("ParseID(String()) = %+v, %v", got, err)
	}
	for _, bad := range []string{"", "pvc-1", "objfuse1|http://h|r|true|UPPER|", "objfuse1|http://h|r|true|b|../x/", "objfuse1|ftp://h|r|true|bkt|", "objfuse1|http://h|r|maybe|bkt|"} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) accepted", bad)
		}
	}
}

func TestContextRoundTrip(t *testing.T) {
	v := Volume{ID: ID{S3: S3{Endpoint: "http://m:9000", Region: "us-east-1", PathStyle: true}, Bucket: "shared", Prefix: "v/pvc-1/"},
		Mount: MountOptions{ParamUID: "1000", ParamFileMode: "0640", ParamAsyncClose: "true", ParamBatchSmallUploads: "false", ParamReadCacheMiB: "256"}}
	got, err := FromContext("anything", v.Context(), Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	if uid, ok := got.Mount.Owner(ParamUID); got.ID != v.ID || !ok || uid != 1000 || got.Mount.Mode(ParamFileMode) != 0o640 || !got.Mount.Bool(ParamAsyncClose) || got.Mount.Bool(ParamBatchSmallUploads) || got.Mount.Int(ParamReadCacheMiB) != 256 {
		t.Fatalf("round trip: %+v", got)
	}
	// What csi-provisioner adds to every volume context.
	ctx := v.Context()
	ctx["storage.kubernetes.io/csiProvisionerIdentity"] = "1700000000000-1234-objfuse.csi.io"
	if _, err := FromContext("anything", ctx, Defaults{}); err != nil {
		t.Fatalf("context with the provisioner's identity: %v", err)
	}
}
