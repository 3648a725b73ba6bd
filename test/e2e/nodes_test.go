//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// Cases across nodes: they need a cluster of at least two (three for the
// StatefulSet) schedulable nodes, and skip with the reason on fewer.

// readyNodes returns the names of the cluster's Ready, schedulable nodes,
// skipping the test when there are fewer than n.
func (s *suite) readyNodes(n int) []string {
	s.t.Helper()
	nodes, err := s.kc.CoreV1().Nodes().List(s.ctx(), metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	var names []string
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			continue
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				names = append(names, n.Name)
			}
		}
	}
	if len(names) < n {
		s.t.Skipf("needs %d Ready schedulable nodes; the cluster has %d (%v): start more (test/local/up.sh %d)", n, len(names), names, n)
	}
	slices.Sort(names)
	return names
}

// onNode pins a pod to a node (through the scheduler, by its hostname label).
func onNode(node string) map[string]string { return map[string]string{corev1.LabelHostname: node} }

// mountersOf returns the live mounter pods of a volume by node.
func (s *suite) mountersOf(handle string) map[string]*corev1.Pod {
	s.t.Helper()
	pods, err := s.kc.CoreV1().Pods(driverNS).List(s.ctx(), metav1.ListOptions{LabelSelector: mounterSelector})
	if err != nil {
		s.t.Fatal(err)
	}
	byNode := map[string]*corev1.Pod{}
	for i, p := range pods.Items {
		if p.Annotations[spec.AnnotationVolume] == handle && p.DeletionTimestamp == nil {
			byNode[p.Annotations[spec.AnnotationNode]] = &pods.Items[i]
		}
	}
	return byNode
}

// attachedNodes returns the nodes with a VolumeAttachment of the PV.
func (s *suite) attachedNodes(pv string) []string {
	s.t.Helper()
	vas, err := s.kc.StorageV1().VolumeAttachments().List(s.ctx(), metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	var nodes []string
	for _, va := range vas.Items {
		if src := va.Spec.Source.PersistentVolumeName; src != nil && *src == pv {
			nodes = append(nodes, va.Spec.NodeName)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// expectVolumeOn waits until the volume has a mounter pod and a
// VolumeAttachment on exactly these nodes (mounter pods on the node they
// are for).
func (s *suite) expectVolumeOn(pv *corev1.PersistentVolume, nodes ...string) {
	s.t.Helper()
	want := slices.Sorted(slices.Values(nodes))
	s.eventually(2*time.Minute, fmt.Sprintf("%s attached and served on %v only", pv.Name, want), func() (bool, error) {
		mounters := s.mountersOf(pv.Spec.CSI.VolumeHandle)
		var on []string
		for node, p := range mounters {
			if p.Spec.NodeName != "" && p.Spec.NodeName != node {
				return false, fmt.Errorf("mounter pod %s for node %s runs on %s", p.Name, node, p.Spec.NodeName)
			}
			on = append(on, node)
		}
		slices.Sort(on)
		attached := s.attachedNodes(pv.Name)
		return slices.Equal(on, want) && slices.Equal(attached, want),
			fmt.Errorf("mounter pods on %v, VolumeAttachments on %v", on, attached)
	})
}

// nodeMounts returns the lines of a node's mount table (as its PID 1 sees
// it) that name the PV, read by a privileged pod on the node.
func (s *suite) nodeMounts(node, pv string) string {
	s.t.Helper()
	name := "mounts-" + fmt.Sprint(time.Now().UnixNano()%1e9)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  onNode(node),
			HostPID:       true,
			Containers: []corev1.Container{{
				Name: "c", Image: testImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"/bin/sh", "-c", "cat /proc/1/mountinfo"},
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
			}},
		},
	}
	if _, err := s.kc.CoreV1().Pods(s.ns).Create(s.ctx(), p, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	out := s.waitPod(name, corev1.PodSucceeded, 2*time.Minute)
	s.kc.CoreV1().Pods(s.ns).Delete(s.ctx(), name, metav1.DeleteOptions{})
	if !strings.Contains(out, " / ") {
		s.t.Fatalf("node %s mount table: %q", node, out)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, pv) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// runOn runs a pod that sleeps on node with the PVC at /data, for execs.
func (s *suite) runOn(name, pvc, node string) {
	s.t.Helper()
	s.pod(name, pvc, "sleep 3600", podOpts{nodeSelector: onNode(node)})
	s.waitPod(name, corev1.PodRunning, 3*time.Minute)
}

// TestRWXAcrossNodes: one RWX PVC used by pods on two nodes. Each node
// gets its own mounter pod and VolumeAttachment; a file closed on node A
// is read on node B within the close-to-open delay the README states
// (statTTL + listTTL: 2 s, plus slack for a listing in flight and the
// exec's own latency); appends alternating between the nodes keep every
// line, in order.
func TestRWXAcrossNodes(t *testing.T) {
	s := newSuite(t)
	nodes := s.readyNodes(2)
	a, b := nodes[0], nodes[1]
	s.pvc("shared", scBucket, corev1.ReadWriteMany)
	pv := s.boundPV("shared")
	bucket, prefix := volume(pv)
	s.runOn("a", "shared", a)
	s.runOn("b", "shared", b)
	s.expectVolumeOn(pv, a, b)

	// A new name, then a changed file, each closed on A and opened on B.
	for i, content := range []string{"first", "second, longer than the first"} {
		if out, err := s.exec(s.ns, "a", "c", "sh", "-c", "printf '%s' '"+content+"' > /data/note.txt"); err != nil {
			t.Fatalf("write on %s: %v %s", a, err, out)
		}
		closed := time.Now()
		const delay = 2*time.Second + 1500*time.Millisecond
		for {
			start := time.Now()
			out, err := s.exec(s.ns, "b", "c", "cat", "/data/note.txt")
			if err == nil && out == content {
				t.Logf("change %d: seen on %s %v after the close on %s", i, b, time.Since(closed).Round(time.Millisecond), a)
				break
			}
			if start.Sub(closed) > delay {
				t.Fatalf("change %d: an open on %s %v after the close on %s read %q (err %v), want %q",
					i, b, start.Sub(closed).Round(time.Millisecond), a, out, err, content)
			}
			<-time.After(100 * time.Millisecond)
		}
	}

	// Appends alternating between the nodes: each waits until its node
	// sees the other's last line (so it appends to that version), then
	// appends its own.
	const rounds = 5
	var want []string
	for i := 0; i < rounds; i++ {
		for _, pod := range []string{"a", "b"} {
			prev := "^$"
			if len(want) > 0 {
				prev = want[len(want)-1]
			}
			line := fmt.Sprintf("%s %d", pod, i)
			script := fmt.Sprintf(`n=0; until [ -z "%[1]s" ] || grep -qx "%[1]s" /data/log.txt 2>/dev/null; do n=$((n+1)); [ $n -lt 100 ] || { echo "never saw: %[1]s"; cat /data/log.txt; exit 1; }; sleep 0.1; done; echo "%[2]s" >> /data/log.txt`,
				strings.TrimPrefix(prev, "^$"), line)
			if out, err := s.exec(s.ns, pod, "c", "sh", "-c", script); err != nil {
				t.Fatalf("append %q on %s: %v %s", line, pod, err, out)
			}
			want = append(want, line)
		}
	}
	if got := s.objectText(bucket, prefix+"log.txt"); got != strings.Join(want, "\n")+"\n" {
		t.Fatalf("log.txt in S3:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// TestUnpublishingOneNodeLeavesTheOther: with one RWX volume on two nodes,
// deleting the pods on node A unpublishes node A only (its mounter pod and
// VolumeAttachment go, and its node keeps no mount of the volume) while a
// pod on node B streams writes through the whole time without an error.
func TestUnpublishingOneNodeLeavesTheOther(t *testing.T) {
	s := newSuite(t)
	nodes := s.readyNodes(2)
	a, b := nodes[0], nodes[1]
	s.pvc("shared", scBucket, corev1.ReadWriteMany)
	pv := s.boundPV("shared")
	bucket, prefix := volume(pv)
	s.runOn("a", "shared", a)
	// It streams until told to stop (bounded: 10 minutes), so the whole
	// unpublish of node A happens while it writes.
	s.pod("streamer", "shared", `set -e; i=0; while [ ! -e /data/stop ] && [ $i -lt 2400 ]; do echo "line $i" >> /data/b.txt; i=$((i+1)); sleep 0.25; done; echo "done $i"`,
		podOpts{nodeSelector: onNode(b)})
	s.waitPod("streamer", corev1.PodRunning, 3*time.Minute)
	s.expectVolumeOn(pv, a, b)

	if err := s.kc.CoreV1().Pods(s.ns).Delete(s.ctx(), "a", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}); err != nil {
		t.Fatal(err)
	}
	s.expectVolumeOn(pv, b)
	if m := s.nodeMounts(a, pv.Name); m != "" {
		t.Fatalf("node %s still mounts %s:\n%s", a, pv.Name, m)
	}
	if p, err := s.kc.CoreV1().Pods(s.ns).Get(s.ctx(), "streamer", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("the streamer on %s stopped before node %s was unpublished: %v %s", b, a, err, s.logs("streamer"))
	}
	if out, err := s.exec(s.ns, "streamer", "c", "touch", "/data/stop"); err != nil {
		t.Fatalf("stop the streamer: %v %s", err, out)
	}
	out := s.waitPod("streamer", corev1.PodSucceeded, 3*time.Minute)
	var n int
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "done %d", &n); err != nil {
		t.Fatalf("streamer on %s: %q", b, out)
	}
	if got := strings.Count(s.objectText(bucket, prefix+"b.txt"), "\n"); got != n {
		t.Fatalf("b.txt has %d lines, the streamer wrote %d", got, n)
	}
	t.Logf("the streamer on %s wrote %d lines while %s was unpublished, without an error", b, n, a)
}

// TestStatefulSetAcrossNodes: a StatefulSet of 3 replicas, one per node,
// sharing one RWX PVC: each writes its own file, then reads all three.
func TestStatefulSetAcrossNodes(t *testing.T) {
	s := newSuite(t)
	s.readyNodes(3)
	s.pvc("shared", scBucket, corev1.ReadWriteMany)
	pv := s.boundPV("shared")
	sel := map[string]string{"app": "replicas"}
	// Each replica writes its file, waits (bounded) until it sees all
	// three written (a file another replica is creating can be seen empty
	// first, as on any filesystem), prints them, and idles.
	script := `set -e; echo "written by $(hostname)" > /data/$(hostname).txt
n=0; until [ "$(cat /data/*.txt | grep -c '^written by')" -ge 3 ]; do n=$((n+1)); [ $n -lt 300 ] || { echo "saw only: $(ls /data)"; exit 1; }; sleep 0.2; done
for f in /data/*.txt; do echo "$f: $(cat $f)"; done; echo read-all; sleep 3600`
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](3),
			Selector:            &metav1.LabelSelector{MatchLabels: sel},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: sel}, TopologyKey: corev1.LabelHostname,
						}},
					}},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name: "c", Image: testImage, ImagePullPolicy: corev1.PullIfNotPresent,
						Command:      []string{"/bin/sh", "-c", script},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
						PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "shared"},
					}}},
				},
			},
		},
	}
	if _, err := s.kc.AppsV1().StatefulSets(s.ns).Create(s.ctx(), ss, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hosts := map[string]bool{}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("replicas-%d", i)
		s.eventually(3*time.Minute, name+" to read all files", func() (bool, error) {
			out := s.logs(name)
			return strings.Contains(out, "read-all"), fmt.Errorf("log %q", out)
		})
		out := s.logs(name)
		for j := 0; j < 3; j++ {
			if want := fmt.Sprintf("/data/replicas-%d.txt: written by replicas-%d", j, j); !strings.Contains(out, want) {
				t.Fatalf("%s read:\n%s\nwant a line %q", name, out, want)
			}
		}
		p, err := s.kc.CoreV1().Pods(s.ns).Get(s.ctx(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hosts[p.Spec.NodeName] = true
	}
	if len(hosts) != 3 {
		t.Fatalf("replicas ran on %v, want 3 nodes", hosts)
	}
	s.expectVolumeOn(pv, slices.Collect(maps.Keys(hosts))...)
}

// deployment runs one replica of script with the PVC at /data; prefer
// favours a node (it can run elsewhere); tolerate bounds how long the pod
// stays on a node that stopped answering (Kubernetes' default is 300 s).
func (s *suite) deployment(name, pvc, script, prefer string, tolerate int64) {
	s.t.Helper()
	sel := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
							Weight: 100,
							Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
								Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{prefer},
							}}},
						}},
					}},
					Tolerations: []corev1.Toleration{
						{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tolerate},
						{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tolerate},
					},
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Containers: []corev1.Container{{
						Name: "c", Image: testImage, ImagePullPolicy: corev1.PullIfNotPresent,
						Command:      []string{"/bin/sh", "-c", script},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
						PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc},
					}}},
				},
			},
		},
	}
	if _, err := s.kc.AppsV1().Deployments(s.ns).Create(s.ctx(), d, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// runningPodOf waits for a Running, not deleted pod of the app (other than
// any of not) and returns it.
func (s *suite) runningPodOf(app string, d time.Duration, not ...string) *corev1.Pod {
	s.t.Helper()
	var found *corev1.Pod
	s.eventually(d, "a running pod of "+app, func() (bool, error) {
		pods, err := s.kc.CoreV1().Pods(s.ns).List(s.ctx(), metav1.ListOptions{LabelSelector: labels.FormatLabels(map[string]string{"app": app})})
		if err != nil {
			return false, err
		}
		var seen []string
		for i, p := range pods.Items {
			seen = append(seen, p.Name+"@"+p.Spec.NodeName+":"+string(p.Status.Phase))
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && !slices.Contains(not, p.Name) {
				found = &pods.Items[i]
				return true, nil
			}
		}
		return false, fmt.Errorf("pods %v", seen)
	})
	return found
}

// workloadScript writes 2 MiB of random data, closes it (acknowledged),
// prints its checksum, and idles; a restarted replica prints what it finds.
const workloadScript = `set -e
if [ -e /data/acked.bin ]; then echo "found $(sha256sum /data/acked.bin | cut -d' ' -f1)"
else head -c 2097152 /dev/urandom > /data/acked.bin; echo "wrote $(sha256sum /data/acked.bin | cut -d' ' -f1)"; fi
sleep 3600`

// awaitLog waits for a line starting with prefix in a pod's log and
// returns the rest of it.
func (s *suite) awaitLog(pod, prefix string) string {
	s.t.Helper()
	var rest string
	s.eventually(2*time.Minute, pod+" to print "+prefix, func() (bool, error) {
		out := s.logs(pod)
		for _, l := range strings.Split(out, "\n") {
			if r, ok := strings.CutPrefix(l, prefix); ok {
				rest = strings.TrimSpace(r)
				return true, nil
			}
		}
		return false, fmt.Errorf("log %q", out)
	})
	return rest
}

// nodeCommand runs one of the suite's node commands (E2E_<NAME>, default
// def) with the node's name in $E2E_NODE.
func (s *suite) nodeCommand(name, def, node string) {
	s.t.Helper()
	c := env("E2E_"+name, def)
	cmd := exec.Command("sh", "-c", c)
	cmd.Env = append(os.Environ(), "E2E_NODE="+node, "KUBECONFIG="+os.Getenv("KUBECONFIG"))
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("%s (%s): %v\n%s", strings.ToLower(name), c, err, out)
	}
}

// victim picks a node that runs none of the driver's controller and
// MinIO, the cluster's own services here, so that losing it loses only
// workloads.
func (s *suite) victim(nodes []string) string {
	s.t.Helper()
	pods, err := s.kc.CoreV1().Pods(driverNS).List(s.ctx(), metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	busy := map[string]bool{}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, "objfuse-node-") && !strings.HasPrefix(p.Name, "objfuse-mounter-") {
			busy[p.Spec.NodeName] = true
		}
	}
	for _, n := range nodes {
		if !busy[n] {
			return n
		}
	}
	s.t.Skipf("every node runs the controller or MinIO (%v)", busy)
	return ""
}

// expectNothingLeftOn waits until the node has no mounter pod, no
// VolumeAttachment and no mount of the PV.
func (s *suite) expectNothingLeftOn(node string, pv *corev1.PersistentVolume) {
	s.t.Helper()
	s.eventually(3*time.Minute, "nothing of "+pv.Name+" left on "+node, func() (bool, error) {
		if _, ok := s.mountersOf(pv.Spec.CSI.VolumeHandle)[node]; ok {
			return false, fmt.Errorf("a mounter pod for %s remains", node)
		}
		if slices.Contains(s.attachedNodes(pv.Name), node) {
			return false, fmt.Errorf("the VolumeAttachment on %s remains", node)
		}
		return true, nil
	})
	if m := s.nodeMounts(node, pv.Name); m != "" {
		s.t.Fatalf("node %s still mounts %s:\n%s", node, pv.Name, m)
	}
}

// workloadOnVictim runs the workload (a Deployment "app" of workloadScript
// on an RWX PVC "data", tolerating an unreachable node for tolerate
// seconds) on a node that runs neither the controller nor MinIO, and
// returns that node, the PV, the pod and the checksum of what it wrote
// and closed.
func (s *suite) workloadOnVictim(tolerate int64) (node string, pv *corev1.PersistentVolume, first *corev1.Pod, sum string) {
	s.t.Helper()
	node = s.victim(s.readyNodes(2))
	s.pvc("data", scBucket, corev1.ReadWriteMany)
	pv = s.boundPV("data")
	s.deployment("app", "data", workloadScript, node, tolerate)
	first = s.runningPodOf("app", 3*time.Minute)
	if first.Spec.NodeName != node {
		s.t.Fatalf("the workload landed on %s, not on %s, the node it prefers", first.Spec.NodeName, node)
	}
	sum = s.awaitLog(first.Name, "wrote ")
	s.expectVolumeOn(pv, node)
	return node, pv, first, sum
}

// TestDrainMovesTheWorkload: `kubectl drain` of the node running a
// workload and its mounter: the workload comes back on another node and
// finds its acknowledged data; once the node is uncordoned, nothing of the
// volume is left on it.
func TestDrainMovesTheWorkload(t *testing.T) {
	s := newSuite(t)
	drained, pv, first, sum := s.workloadOnVictim(300)
	t.Cleanup(func() { s.nodeCommand("UNCORDON", `"${E2E_KUBECTL:-kubectl}" uncordon "$E2E_NODE"`, drained) })
	start := time.Now()
	s.nodeCommand("DRAIN", `"${E2E_KUBECTL:-kubectl}" drain "$E2E_NODE" --ignore-daemonsets --delete-emptydir-data --timeout=3m`, drained)
	t.Logf("kubectl drain %s took %v", drained, time.Since(start).Round(time.Second))

	moved := s.runningPodOf("app", 3*time.Minute, first.Name)
	t.Logf("the workload ran again on %s %v after the drain began", moved.Spec.NodeName, time.Since(start).Round(time.Second))
	if moved.Spec.NodeName == drained {
		t.Fatalf("the workload came back on the drained node %s", drained)
	}
	if got := s.awaitLog(moved.Name, "found "); got != sum {
		t.Fatalf("on %s the workload found %q, wrote %q on %s", moved.Spec.NodeName, got, sum, drained)
	}
	s.nodeCommand("UNCORDON", `"${E2E_KUBECTL:-kubectl}" uncordon "$E2E_NODE"`, drained)
	s.expectNothingLeftOn(drained, pv)
	s.expectVolumeOn(pv, moved.Spec.NodeName)
}

// TestNodeLossMovesTheWorkload: a node running a workload and its mounter
// stops abruptly (kubelet, containerd and every container at once). After
// Kubernetes' timeouts (the node goes NotReady after the controller
// manager's node-monitor-grace-period, 50 s by default; its pods are
// evicted once their toleration of node.kubernetes.io/unreachable runs
// out: 300 s by default, 10 s here) the workload runs on another node and
// finds its acknowledged data. When the node comes back, nothing of the
// volume is left on it.
func TestNodeLossMovesTheWorkload(t *testing.T) {
	s := newSuite(t)
	if os.Getenv("E2E_STOP_NODE") == "" && !strings.HasPrefix(s.readyNodes(2)[0], "objfuse-node-") {
		t.Skip("losing a node needs E2E_STOP_NODE and E2E_START_NODE on a cluster other than test/local's")
	}
	lost, pv, first, sum := s.workloadOnVictim(10)

	start := time.Now()
	s.nodeCommand("STOP_NODE", `../local/node.sh kill "$E2E_NODE"`, lost)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			s.nodeCommand("START_NODE", `../local/node.sh start "$E2E_NODE"`, lost)
		}
	})
	moved := s.runningPodOf("app", 4*time.Minute, first.Name)
	t.Logf("the workload ran again on %s %v after %s was lost", moved.Spec.NodeName, time.Since(start).Round(time.Second), lost)
	if got := s.awaitLog(moved.Name, "found "); got != sum {
		t.Fatalf("on %s the workload found %q, wrote %q on %s", moved.Spec.NodeName, got, sum, lost)
	}
	s.nodeCommand("START_NODE", `../local/node.sh start "$E2E_NODE"`, lost)
	restarted = true
	back := time.Now()
	s.expectNothingLeftOn(lost, pv)
	t.Logf("%s was clean %v after it came back", lost, time.Since(back).Round(time.Second))
	s.expectVolumeOn(pv, moved.Spec.NodeName)
}
