//go:build tools

package conformance

// Commands run.sh builds from this module, so that each comes from the
// versions go.mod pins: agnhost, the suite's helper image (images.sh), from
// the same Kubernetes release as the suite; the ginkgo CLI at the version
// the suite was built with.
import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
