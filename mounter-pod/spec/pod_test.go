package spec_test

import (
	"slices"
	"testing"

	"github.com/objfuse/objfuse/driver/volume"
	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// A mounter on the pod network serves metrics on its pod IP, announced to
// Prometheus, unless the template turns them off; one on the host network
// serves none (a fixed port would clash between mounters). The flag must come before the source, where
// objfuse-mount still reads flags.
func TestMounterPodMetrics(t *testing.T) {
	m := spec.Mounter{VolumeID: "v", NodeID: "n", Volume: volume.Volume{
		ID: volume.ID{S3: volume.S3{Endpoint: "http://s3:9000", Region: "us-east-1"}, Bucket: "bucket-1"},
	}}
	tests := []struct {
		name     string
		template spec.Template
		want     bool
	}{
		{"pod network", spec.Template{Image: "i"}, true},
		{"host network", spec.Template{Image: "i", HostNetwork: true}, false},
		{"turned off", spec.Template{Image: "i", NoMetrics: true}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod, err := tc.template.Pod(m, "ns", "host")
			if err != nil {
				t.Fatal(err)
			}
			c := pod.Spec.Containers[0]
			if last := c.Args[len(c.Args)-1]; last != m.Volume.Source() {
				t.Errorf("last argument %q, want the source %q", last, m.Volume.Source())
			}
			if want := m.Args(spec.SocketPath, spec.CredentialsDir, spec.StagingDir); !tc.want && !slices.Equal(c.Args, want) {
				t.Errorf("args %q, want %q", c.Args, want)
			}
			served := slices.Contains(c.Args, "--metrics-addr=:9810")
			ported := len(c.Ports) == 1 && c.Ports[0].Name == "metrics" && c.Ports[0].ContainerPort == spec.MetricsPort
			announced := pod.Annotations["prometheus.io/scrape"] == "true" && pod.Annotations["prometheus.io/port"] == "9810"
			if served != tc.want || ported != tc.want || announced != tc.want {
				t.Errorf("metrics flag %v, port %v, annotations %v; want all %v", served, ported, announced, tc.want)
			}
		})
	}
}
