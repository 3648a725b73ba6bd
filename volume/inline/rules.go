package inline

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/objfuse/objfuse/volume"
)

// Rule lets the pods of one namespace declare inline volumes of one
// bucket at one endpoint: the whole bucket, or with Prefix set, that
// prefix and the prefixes below it.
type Rule struct {
	Namespace string `json:"namespace"`
	Endpoint  string `json:"endpoint"`
	Bucket    string `json:"bucket"`
	// Prefix "" is the whole bucket; "data" allows "data/" and "data/x/".
	Prefix string `json:"prefix,omitempty"`
	// MaxMounters bounds the inline volumes the namespace's pods may
	// have mounted at once (each one mounter pod per node, in the
	// driver's namespace, outside the namespace's ResourceQuota); 0
	// means DefaultMaxMounters. A namespace's largest rule holds.
	MaxMounters int `json:"maxMounters,omitempty"`
}

// DefaultMaxMounters is a namespace's MaxMounters when its rules say none.
const DefaultMaxMounters = 16

// Rules are the allow-list, as the admin writes it (the chart's
// inline.allow, rendered into a ConfigMap the driver reads).
type Rules []Rule

// ErrNotAllowed: no rule lets the pod's namespace declare the volume.
var ErrNotAllowed = errors.New("inline volume not allowed")

// Parse reads the allow-list: a YAML list of rules. Unknown fields are
// refused, so a typo is an error, not a rule that allows nothing.
func Parse(data []byte) (Rules, error) {
	var rs Rules
	if err := yaml.UnmarshalStrict(data, &rs); err != nil {
		return nil, fmt.Errorf("inline volume allow-list: %w", err)
	}
	for i := range rs {
		r := &rs[i]
		if err := r.check(); err != nil {
			return nil, fmt.Errorf("inline volume allow-list, rule %d: %w", i+1, err)
		}
	}
	return rs, nil
}

// check validates r and puts its endpoint and prefix in the form a
// volume's have, so that Allows compares like with like.
func (r *Rule) check() error {
	if r.MaxMounters < 0 {
		return fmt.Errorf("maxMounters %d: want a positive number, or none for %d", r.MaxMounters, DefaultMaxMounters)
	}
	if errs := validation.IsDNS1123Label(r.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", r.Namespace, strings.Join(errs, "; "))
	}
	p, err := volume.ParseParams(map[string]string{volume.ParamEndpoint: r.Endpoint, volume.ParamBucket: r.Bucket, volume.ParamPrefix: r.Prefix}, volume.Defaults{})
	if err != nil {
		return err
	}
	r.Endpoint, r.Prefix = p.S3.Endpoint, p.BasePrefix
	return nil
}

// Load reads the allow-list file at path; a missing file allows nothing.
func Load(path string) (Rules, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inline volume allow-list: %w", err)
	}
	return Parse(data)
}

// Namespaces lists the namespaces that have a rule, sorted, each once.
func (rs Rules) Namespaces() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rs {
		if !seen[r.Namespace] {
			seen[r.Namespace] = true
			out = append(out, r.Namespace)
		}
	}
	sort.Strings(out)
	return out
}

// MountersFor is how many inline volumes namespace's pods may have
// mounted at once.
func (rs Rules) MountersFor(namespace string) int {
	limit := 0
	for _, r := range rs {
		if r.Namespace == namespace {
			limit = max(limit, cmp.Or(r.MaxMounters, DefaultMaxMounters))
		}
	}
	return limit
}

// Allows says whether a pod in namespace may declare an inline volume of
// id, and if not, what its namespace may declare: the message a user
// sees in the pod's Events.
func (rs Rules) Allows(namespace string, id volume.ID) error {
	var mine []string
	for _, r := range rs {
		if r.Namespace != namespace {
			continue
		}
		if strings.TrimSuffix(r.Endpoint, "/") == strings.TrimSuffix(id.S3.Endpoint, "/") && r.Bucket == id.Bucket && strings.HasPrefix(id.Prefix, r.Prefix) {
			return nil
		}
		mine = append(mine, r.String())
	}
	want := fmt.Sprintf("bucket %q", id.Bucket)
	if id.Prefix != "" {
		want += fmt.Sprintf(" prefix %q", id.Prefix)
	}
	want += " at " + id.S3.Endpoint
	if len(mine) == 0 {
		return fmt.Errorf("%w: pods of namespace %q may not declare objfuse volumes inline (asked for %s): the driver's admin allows it per namespace (Helm value inline.allow, objfuse-csi --inline-allow); or use a PVC",
			ErrNotAllowed, namespace, want)
	}
	return fmt.Errorf("%w: pods of namespace %q may declare inline only %s, not %s", ErrNotAllowed, namespace, strings.Join(mine, "; "), want)
}

// String says what r allows, for messages.
func (r Rule) String() string {
	s := fmt.Sprintf("bucket %q", r.Bucket)
	if r.Prefix != "" {
		s += fmt.Sprintf(" under prefix %q", r.Prefix)
	}
	return s + " at " + r.Endpoint
}
