package volume

import (
	"errors"
	"testing"
)

// A StorageClass says pvc or driver; CreateVolume resolves that to the
// namespace itself, which the volume context carries, and a context
// holding a StorageClass's value is refused: it would mean a namespace
// named "pvc".
func TestMounterNamespace(t *testing.T) {
	def := Defaults{Endpoint: "http://minio:9000"}
	resolve := func(sc, pvcNamespace string) (string, error) {
		p, err := ParseParams(map[string]string{ParamMounterNamespace: sc}, def)
		if err != nil {
			return "", err
		}
		if err := p.ResolveMounterNamespace(pvcNamespace); err != nil {
			return "", err
		}
		return p.Mounter.Namespace, nil
	}
	for _, tc := range []struct {
		sc, pvcNamespace, want string
		bad                    bool
	}{
		{"", "team-a", "", false},
		{"driver", "team-a", "", false},
		{"pvc", "team-a", "team-a", false},
		{"pvc", "", "", true},               // no --extra-create-metadata
		{"team-a", "team-a", "", true},      // a namespace is not a StorageClass's value
		{"Not_A_Label", "team-a", "", true}, // caught by ParseParams
	} {
		got, err := resolve(tc.sc, tc.pvcNamespace)
		var pe *ParseError
		if tc.bad != (err != nil) || got != tc.want || (err != nil && (!errors.As(err, &pe) || pe.Param != ParamMounterNamespace)) {
			t.Errorf("mounterNamespace %q, PVC in %q: %q, %v; want %q (bad: %v), naming %s", tc.sc, tc.pvcNamespace, got, err, tc.want, tc.bad, ParamMounterNamespace)
		}
	}

	v := Volume{ID: ID{S3: S3{Endpoint: "http://minio:9000", Region: DefaultRegion}, Bucket: "b1b"}, Mounter: MounterResources{Namespace: "team-a"}}
	back, err := FromContext(v.ID.String(), v.Context(), def)
	if err != nil || back.Mounter.Namespace != "team-a" {
		t.Fatalf("the context of a volume with mounters in team-a reads back as %+v, %v", back.Mounter, err)
	}
	for _, sc := range []string{"pvc", "driver"} {
		ctx := v.Context()
		ctx[ParamMounterNamespace] = sc
		if _, err := FromContext(v.ID.String(), ctx, def); err == nil {
			t.Errorf("a volume context with mounterNamespace %q (a StorageClass's value) was taken", sc)
		}
	}
}
