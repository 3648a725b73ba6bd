// Package deploy checks the shipped manifests: the Helm chart and the
// kustomize base must render the same objects.
package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/volume/inline"
)

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// tool finds a binary in PATH or GOPATH/bin; CI installs both with go install.
func tool(t *testing.T, name, install string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	p := filepath.Join(gopath, "bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found; install it with: go install %s", name, install)
	}
	return p
}

func render(t *testing.T, name string, args ...string) map[string]map[string]any {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = repoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, stderr.String())
	}
	objs := map[string]map[string]any{}
	for _, doc := range strings.Split(string(out), "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc+"\n"), &m); err != nil {
			t.Fatalf("parse %s output: %v\n%s", name, err, doc)
		}
		if len(m) == 0 {
			continue
		}
		meta, _ := m["metadata"].(map[string]any)
		key := m["kind"].(string) + "/" + strOf(meta["namespace"]) + "/" + strOf(meta["name"])
		if _, dup := objs[key]; dup {
			t.Fatalf("%s renders %s twice", name, key)
		}
		objs[key] = m
	}
	return objs
}

func strOf(v any) string {
	s, _ := v.(string)
	return s
}

func TestHelmAndKustomizeRenderTheSameObjects(t *testing.T) {
	helm := tool(t, "helm", "helm.sh/helm/v3/cmd/helm@v3.22.0")
	kustomize := tool(t, "kustomize", "sigs.k8s.io/kustomize/kustomize/v5@v5.8.1")
	fromHelm := render(t, helm, "template", "objfuse", "deploy/helm/objfuse")
	fromKustomize := render(t, kustomize, "build", "deploy/kustomize/base")
	if len(fromKustomize) < 10 {
		t.Fatalf("kustomize rendered only %d objects", len(fromKustomize))
	}
	for key, k := range fromKustomize {
		h, ok := fromHelm[key]
		if !ok {
			t.Errorf("helm does not render %s", key)
			continue
		}
		if !reflect.DeepEqual(h, k) {
			hy, _ := yaml.Marshal(h)
			ky, _ := yaml.Marshal(k)
			t.Errorf("%s differs:\n--- helm\n%s\n--- kustomize\n%s", key, hy, ky)
		}
	}
	for key := range fromHelm {
		if _, ok := fromKustomize[key]; !ok {
			t.Errorf("kustomize does not render %s", key)
		}
	}
}

// TestNoSecretsInArgs: credentials reach pods only as mounted files.
func TestNoSecretsInArgs(t *testing.T) {
	for _, dir := range []string{"deploy/kustomize/base", "deploy/helm/objfuse/templates"} {
		files, _ := filepath.Glob(filepath.Join(repoRoot(t), dir, "*.yaml"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			for _, bad := range []string{"secretAccessKey", "AWS_SECRET_ACCESS_KEY", "secretKeyRef"} {
				if bytes.Contains(b, []byte(bad)) {
					t.Errorf("%s mentions %s", f, bad)
				}
			}
		}
	}
}

// TestHelmCABundle: the chart's caBundle becomes the controller's
// --ca-bundle file, next to the mounter template in the same ConfigMap.
func TestHelmCABundle(t *testing.T) {
	helm := tool(t, "helm", "helm.sh/helm/v3/cmd/helm@v3.22.0")
	pem := "-----BEGIN CERTIFICATE-----\nMIIBdummy\n-----END CERTIFICATE-----\n"
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, []byte(pem), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := render(t, helm, "template", "objfuse", "deploy/helm/objfuse", "--set-file", "caBundle="+file)
	cm := objs["ConfigMap/objfuse-system/objfuse-mounter"]
	data, _ := cm["data"].(map[string]any)
	if data["ca.crt"] != pem {
		t.Errorf("ConfigMap objfuse-mounter's ca.crt: %q, want %q", data["ca.crt"], pem)
	}
	if !strings.Contains(strOf(data["mounter.yaml"]), "image:") {
		t.Errorf("mounter.yaml lost: %q", data["mounter.yaml"])
	}
	y, _ := yaml.Marshal(objs["Deployment/objfuse-system/objfuse-controller"])
	if !strings.Contains(string(y), "--ca-bundle=/etc/objfuse/ca.crt") {
		t.Errorf("controller has no --ca-bundle:\n%s", y)
	}
	// Without it, no such flag: the default render is the kustomize base's.
	y, _ = yaml.Marshal(render(t, helm, "template", "objfuse", "deploy/helm/objfuse")["Deployment/objfuse-system/objfuse-controller"])
	if strings.Contains(string(y), "--ca-bundle") {
		t.Errorf("controller has --ca-bundle by default")
	}
}

// TestChartLints: helm lint --strict passes, and the values schema
// refuses a misspelt key and a wrong type with a message naming them.
func TestChartLints(t *testing.T) {
	helm := tool(t, "helm", "helm.sh/helm/v3/cmd/helm@v3.22.0")
	cmd := exec.Command(helm, "lint", "--strict", "deploy/helm/objfuse")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	for set, want := range map[string]string{
		"sidecars.image=x":      "additional properties 'image' not allowed",
		"mounter.metrics=maybe": "/mounter/metrics",
	} {
		cmd := exec.Command(helm, "template", "objfuse", "deploy/helm/objfuse", "--set", set)
		cmd.Dir = repoRoot(t)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("--set %s: %v, want an error saying %q:\n%s", set, err, want, out)
		}
	}
}

// TestDefaultChartImagesArePublic: with default values every image the
// chart runs, mounter pods' included, names a registry: the chart works on
// any cluster that can pull public images.
func TestDefaultChartImagesArePublic(t *testing.T) {
	helm := tool(t, "helm", "helm.sh/helm/v3/cmd/helm@v3.22.0")
	objs := render(t, helm, "template", "objfuse", "deploy/helm/objfuse")
	var images []string
	for key, o := range objs {
		y, _ := yaml.Marshal(o)
		for _, line := range strings.Split(string(y), "\n") {
			// Containers' image fields, and the mounter template's, which
			// is a ConfigMap's text.
			if _, img, ok := strings.Cut(strings.TrimSpace(strings.ReplaceAll(line, `\n`, "\n")), "image: "); ok {
				images = append(images, key+" "+img)
			}
		}
		if cm, ok := o["data"].(map[string]any); ok {
			for _, line := range strings.Split(strOf(cm["mounter.yaml"]), "\n") {
				if _, img, ok := strings.Cut(strings.TrimSpace(line), "image: "); ok {
					images = append(images, key+" "+img)
				}
			}
		}
	}
	if len(images) < 5 {
		t.Fatalf("found only %d images: %q", len(images), images)
	}
	for _, ki := range images {
		_, img, _ := strings.Cut(ki, " ")
		host, _, named := strings.Cut(img, "/")
		if !named || !strings.ContainsAny(host, ".:") {
			t.Errorf("%s: not an image of a public registry", ki)
		}
	}
}

// TestLeastRights: the node plugin's service account may create Events
// anywhere and read and patch pods only in the driver's namespace (it
// learns the pods a volume serves from kubelet, not from the API; it
// patches a mounter pod's image to upgrade it in place); mounter pods admit
// connections only to their metrics port, from the monitoring namespace.
func TestLeastRights(t *testing.T) {
	helm := tool(t, "helm", "helm.sh/helm/v3/cmd/helm@v3.22.0")
	objs := render(t, helm, "template", "objfuse", "deploy/helm/objfuse")
	rules := func(key string) []string {
		o, ok := objs[key]
		if !ok {
			t.Fatalf("no %s", key)
		}
		var out []string
		for _, r := range o["rules"].([]any) {
			r := r.(map[string]any)
			for _, res := range r["resources"].([]any) {
				for _, v := range r["verbs"].([]any) {
					out = append(out, res.(string)+":"+v.(string))
				}
			}
		}
		return out
	}
	if got := rules("ClusterRole//objfuse-node"); !reflect.DeepEqual(got, []string{"events:create", "events:patch"}) {
		t.Errorf("the node's ClusterRole grants %q, want Events only", got)
	}
	if got := rules("Role/objfuse-system/objfuse-node"); !reflect.DeepEqual(got, []string{"pods:get", "pods:patch"}) {
		t.Errorf("the node's Role in objfuse-system grants %q, want get and patch pods only", got)
	}
	// Cluster-wide, the controller watches pods (to attach the volumes of
	// scheduled ones) but may not read one by name, make, change or
	// delete one outside its namespace.
	var podRights []string
	for _, r := range rules("ClusterRole//objfuse-controller") {
		if strings.HasPrefix(r, "pods:") {
			podRights = append(podRights, r)
		}
	}
	if !reflect.DeepEqual(podRights, []string{"pods:list", "pods:watch"}) {
		t.Errorf("the controller's ClusterRole grants %q on pods, want list and watch only", podRights)
	}
	np := objs["NetworkPolicy/objfuse-system/objfuse-mounter"]
	y, _ := yaml.Marshal(np["spec"])
	want := `ingress:
- from:
  - namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: monitoring
  ports:
  - port: ` + strconv.Itoa(spec.MetricsPort) + `
    protocol: TCP
podSelector:
  matchExpressions:
  - key: objfuse.csi.io/mounter
    operator: Exists
policyTypes:
- Ingress
`
	if string(y) != want {
		t.Errorf("the mounters' NetworkPolicy:\n%s\nwant:\n%s", y, want)
	}
	// In each namespace listed for mounters in the PVC's namespace: the
	// controller's rights on mounter pods and Secrets, the node's on pods,
	// the same NetworkPolicy; nothing else, and nothing cluster-wide more.
	tenants := render(t, helm, "template", "objfuse", "deploy/helm/objfuse", "--set", "mounter.pvcNamespaces={team-a,team-b}")
	objs = tenants
	for _, ns := range []string{"team-a", "team-b"} {
		if got := rules("Role/" + ns + "/objfuse-node"); !reflect.DeepEqual(got, []string{"pods:get"}) {
			t.Errorf("the node's Role in %s grants %q, want get pods only", ns, got)
		}
		if got, want := rules("Role/"+ns+"/objfuse-controller"), rules("Role/objfuse-system/objfuse-controller"); len(got) != 12 || !reflect.DeepEqual(got, want[:12]) {
			t.Errorf("the controller's Role in %s grants %q, want its mounter pod and Secret rights of objfuse-system, %q", ns, got, want[:12])
		}
		for _, b := range []string{"objfuse-node", "objfuse-controller"} {
			sub := tenants["RoleBinding/"+ns+"/"+b]["subjects"].([]any)[0].(map[string]any)
			if sub["name"] != b || sub["namespace"] != "objfuse-system" {
				t.Errorf("RoleBinding %s/%s binds %v", ns, b, sub)
			}
		}
		tn, _ := yaml.Marshal(tenants["NetworkPolicy/"+ns+"/objfuse-mounter"]["spec"])
		if string(tn) != want {
			t.Errorf("the mounters' NetworkPolicy in %s:\n%s\nwant:\n%s", ns, tn, want)
		}
	}
	inTenants := 0
	for key := range tenants {
		if strings.Contains(key, "/team-") {
			inTenants++
		}
	}
	if inTenants != 10 {
		t.Errorf("%d objects in the two PVC namespaces, want 5 each", inTenants)
	}
	if got := rules("ClusterRole//objfuse-node"); !reflect.DeepEqual(got, []string{"events:create", "events:patch"}) {
		t.Errorf("with PVC namespaces the node's ClusterRole grants %q", got)
	}

	// In each namespace whose pods may declare inline volumes: the
	// controller may read pods and Secrets, nothing more; the node gets
	// no right at all (it cannot start mounters of its choosing).
	objs = render(t, helm, "template", "objfuse", "deploy/helm/objfuse", "--set",
		"inline.allow[0].namespace=team-c,inline.allow[0].endpoint=http://h:9000,inline.allow[0].bucket=bkt-c,inline.allow[1].namespace=team-c,inline.allow[1].endpoint=http://h:9000,inline.allow[1].bucket=bkt-d")
	if got := rules("Role/team-c/objfuse-inline"); !reflect.DeepEqual(got, []string{"pods:get", "pods:list", "pods:watch", "secrets:get"}) {
		t.Errorf("the inline Role in team-c grants %q", got)
	}
	for key := range objs {
		if strings.Contains(key, "/team-c/") && key != "Role/team-c/objfuse-inline" && key != "RoleBinding/team-c/objfuse-inline" {
			t.Errorf("the chart renders %s for an inline namespace", key)
		}
	}
	if got := rules("Role/objfuse-system/objfuse-node"); !reflect.DeepEqual(got, []string{"pods:get", "pods:patch"}) {
		t.Errorf("with inline volumes the node's Role grants %q", got)
	}

	// Without metrics, nothing may connect to a mounter.
	np = render(t, helm, "template", "objfuse", "deploy/helm/objfuse", "--set", "mounter.metrics=false")["NetworkPolicy/objfuse-system/objfuse-mounter"]
	if in, ok := np["spec"].(map[string]any)["ingress"]; !ok || len(in.([]any)) != 0 {
		t.Errorf("without metrics the NetworkPolicy admits %v, want nothing", in)
	}
}

// The local overlay's tenant namespace holds what the chart renders for
// it (deploy/kustomize/local/tenant.yaml was copied from that rendering),
// and its controller is told the namespace as the chart's is.
func TestLocalTenantIsTheChartsRendering(t *testing.T) {
	helm := tool(t, "helm", "helm.sh/helm/v3/cmd/helm@v3.22.0")
	kustomize := tool(t, "kustomize", "sigs.k8s.io/kustomize/kustomize/v5@v5.8.1")
	const tenant = "objfuse-e2e-tenant"
	fromHelm := render(t, helm, "template", "objfuse", "deploy/helm/objfuse", "--set", "mounter.pvcNamespaces={"+tenant+"}")
	local := render(t, kustomize, "build", "deploy/kustomize/local")
	n := 0
	for key, h := range fromHelm {
		if !strings.Contains(key, "/"+tenant+"/") {
			continue
		}
		n++
		if k, ok := local[key]; !ok {
			t.Errorf("the local overlay has no %s", key)
		} else if !reflect.DeepEqual(h, k) {
			hy, _ := yaml.Marshal(h)
			ky, _ := yaml.Marshal(k)
			t.Errorf("%s differs:\n--- helm\n%s\n--- local\n%s", key, hy, ky)
		}
	}
	if n != 5 {
		t.Errorf("the chart renders %d objects in %s, want 5", n, tenant)
	}
	// And the namespace whose pods may declare inline volumes: the
	// chart's objects for the local overlay's rule, the rule itself.
	const inlineNS = "objfuse-e2e-inline"
	inlineHelm := render(t, helm, "template", "objfuse", "deploy/helm/objfuse", "--set",
		"inline.allow[0].namespace="+inlineNS+",inline.allow[0].endpoint=http://10.243.0.11:9000,inline.allow[0].bucket=objfuse-inline,inline.allow[0].prefix=allowed")
	n = 0
	for key, h := range inlineHelm {
		if !strings.Contains(key, "/"+inlineNS+"/") {
			continue
		}
		n++
		if k, ok := local[key]; !ok || !reflect.DeepEqual(h, k) {
			t.Errorf("the local overlay's %s is not the chart's", key)
		}
	}
	if n != 2 {
		t.Errorf("the chart renders %d objects in %s, want 2 (a Role and its binding)", n, inlineNS)
	}
	allow := func(objs map[string]map[string]any) string {
		return strOf(objs["ConfigMap/objfuse-system/objfuse-mounter"]["data"].(map[string]any)["inline-allow.yaml"])
	}
	hr, err1 := inline.Parse([]byte(allow(inlineHelm)))
	lr, err2 := inline.Parse([]byte(allow(local)))
	if err1 != nil || err2 != nil || !reflect.DeepEqual(hr, lr) || len(hr) != 1 {
		t.Errorf("inline allow-list: chart %v (%v), local %v (%v)", hr, err1, lr, err2)
	}
	args := func(objs map[string]map[string]any) []string { // in any order
		spec := objs["Deployment/objfuse-system/objfuse-controller"]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		var out []string
		for _, a := range spec["containers"].([]any)[0].(map[string]any)["args"].([]any) {
			out = append(out, a.(string))
		}
		sort.Strings(out)
		return out
	}
	if h, l := args(fromHelm), args(local); !reflect.DeepEqual(h, l) {
		t.Errorf("the controller's arguments: chart %v, local %v", h, l)
	}
}
