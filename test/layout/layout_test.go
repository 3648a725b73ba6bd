// Package layout guards the arrows between objfuse's packages: a package
// never depends on what depends on it, so that each can be read, tested
// and changed on its own.
package layout

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/objfuse/objfuse/"

// rule: no package matching from may depend, directly or not, on a
// package under any of forbidden, unless it is under one of except.
type rule struct {
	from      string // a package pattern, as go list takes it
	forbidden []string
	why       string
	except    []string
}

var rules = []rule{
	{"./fusefs/...", []string{"driver", "mounter-pod", "volume", "cmd", "test"},
		"the filesystem knows nothing of Kubernetes or CSI: objfuse-mount runs it by hand too", nil},
	{"./mounter-pod/...", []string{"driver", "cmd", "test"},
		"the mounter side must not depend on the driver side; what both speak is in volume", nil},
	{"./volume/...", []string{"driver", "mounter-pod", "fusefs", "cmd", "test"},
		"volume is the shared vocabulary: it depends on no side (but the filesystem's defaults, constants)", []string{"fusefs/limits"}},
	{"./driver/...", []string{"cmd", "test"}, "mains and test harnesses are leaves", nil},
	{"./cmd/objfuse-csi", []string{"fusefs", "mounter-pod/serve"},
		"the driver builds mounters and talks to S3, but serves no filesystem: its binary links no FUSE server",
		[]string{"fusefs/store", "fusefs/limits"}},
}

// TestNoForbiddenImports fails when a package depends on one its rule
// forbids, naming the package and the path of imports to it.
func TestNoForbiddenImports(t *testing.T) {
	for _, r := range rules {
		for pkg, deps := range depsOf(t, r.from) {
			for _, dep := range deps {
				for _, f := range r.forbidden {
					if under(dep, f) && !slices.ContainsFunc(r.except, func(e string) bool { return under(dep, e) }) {
						t.Errorf("%s depends on %s: %s", pkg, dep, r.why)
					}
				}
			}
		}
	}
}

// TestRulesCatchAnArrow checks the checker: a package the rules forbid is
// found among the dependencies of one that really has it.
func TestRulesCatchAnArrow(t *testing.T) {
	found := false
	for _, deps := range depsOf(t, "./cmd/objfuse-csi") {
		for _, dep := range deps {
			found = found || under(dep, "driver")
		}
	}
	if !found {
		t.Fatal("objfuse-csi's dependencies do not show driver: the checker would miss a forbidden arrow")
	}
}

// under reports whether pkg is the module's folder dir or below it.
func under(pkg, dir string) bool {
	p := module + dir
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

// depsOf maps each package matching pattern to its module dependencies
// (not those of its tests).
func depsOf(t *testing.T, pattern string) map[string][]string {
	t.Helper()
	pkgs := run(t, "go", "list", pattern)
	out := map[string][]string{}
	for _, pkg := range pkgs {
		for _, dep := range run(t, "go", "list", "-deps", pkg) {
			if dep != pkg && strings.HasPrefix(dep, module) {
				out[pkg] = append(out[pkg], dep)
			}
		}
	}
	return out
}

func run(t *testing.T, name string, args ...string) []string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = "../.."
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return strings.Fields(string(b))
}
