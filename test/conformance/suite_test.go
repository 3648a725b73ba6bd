// Package conformance is the upstream Kubernetes storage suite for external
// CSI drivers (k8s.io/kubernetes/test/e2e/storage/external) and nothing else:
// a storage-only e2e.test. It runs the specs that -storage.testdriver defines
// from a driver definition (driver.yaml); run.sh builds and runs it.
package conformance

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/component-base/logs"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"

	// -storage.testdriver: each driver definition adds its specs.
	_ "k8s.io/kubernetes/test/e2e/storage/external"

	// Framework extensions upstream's e2e.test installs: namespace dumps
	// on failure, optional metrics, a node readiness check after each spec,
	// and gomega's object formatting.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/format"

	// Authentication plugins and logging flags, as upstream's suite.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	_ "k8s.io/component-base/logs/testinit"
)

// TestMain parses the flags before any spec exists: the framework's and
// -storage.testdriver, whose parsing defines the specs. As upstream's
// test/e2e/e2e_test.go.
func TestMain(m *testing.M) {
	showVersion := flag.Bool("version", false, "print the Kubernetes version this suite was built from and exit")
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Get())
		os.Exit(0)
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown arguments: %q\n", flag.Args())
		os.Exit(1)
	}
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	if framework.TestContext.RepoRoot != "" {
		testfiles.AddFileSource(testfiles.RootFileSource{Root: framework.TestContext.RepoRoot})
	}
	os.Exit(m.Run())
}

// TestStorage runs the specs through Ginkgo, once per parallel process.
func TestStorage(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "objfuse: Kubernetes storage suite", suiteConfig, reporterConfig)
}

// The part of upstream's suite setup the storage specs rely on: every node
// schedulable, and the node count known. Upstream also waits for kube-system
// pods and deletes leftover namespaces (-clean-start); neither is needed here.
var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "loading the client")
	timeouts := framework.NewTimeoutContext()
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, timeouts.NodeSchedulable))
	server, err := c.Discovery().ServerVersion()
	framework.ExpectNoError(err, "asking the API server's version")
	framework.Logf("suite built from %s; kube-apiserver %s", version.Get().GitVersion, server.GitVersion)
	return nil
}, func(ctx context.Context, _ []byte) {
	if framework.TestContext.CloudConfig.NumNodes != framework.DefaultNumNodes {
		return
	}
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "loading the client")
	nodes, err := e2enode.GetReadySchedulableNodes(ctx, c)
	framework.ExpectNoError(err)
	framework.TestContext.CloudConfig.NumNodes = len(nodes.Items)
})
