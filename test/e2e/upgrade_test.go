//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objfuse/objfuse/mounter-pod/spec"
)

// TestMounterUpgradeHandsOver: the upgrade procedure (README, "Upgrading
// mounters"): the driver is given a newer image (here the same image
// under another tag, made on every node by $E2E_TAG_IMAGE) as `helm
// upgrade --set image.tag=...` would: the node plugin's, the
// controller's and the mounter template's. As the node plugins roll out,
// the writer's node's arms its mounter's hand-over and sets the mounter
// pod's image; kubelet stops the container, the mounter holds new
// requests, uploads what was written and exits, and the new image takes
// the connection over. The old image is then given back the same way,
// which hands over back. The writer waits between two lines meanwhile,
// polling the mount (a rollout takes longer than its lines), and neither
// it nor the reader sees an error.
func TestMounterUpgradeHandsOver(t *testing.T) {
	s := newSuite(t)
	s.survives(true, func(mounter *corev1.Pod) {
		old := mounter.Spec.Containers[0].Image
		newer := strings.Split(old, ":")[0] + ":upgrade-test"
		s.tagImageOnNodes(old, newer)
		restored := false
		t.Cleanup(func() {
			if !restored {
				s.setDriverImage(newer, old)
			}
		})
		for _, step := range []struct{ from, to string }{{old, newer}, {newer, old}} {
			start := time.Now()
			now, err := s.kc.CoreV1().Pods(driverNS).Get(s.ctx(), mounter.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			before := restarts(now)
			s.setDriverImage(step.from, step.to)
			s.handedOver(mounter.Name, step.to, before)
			s.eventFor(s.ns, "Pod", "writer", "upgraded from "+step.from+" to "+step.to, 2*time.Minute)
			t.Logf("%s → %s: the Event came %v after the driver's image changed: %s", step.from, step.to,
				time.Since(start).Round(time.Millisecond), s.eventMessage(s.ns, "writer", "upgraded from "+step.from))
			restored = step.to == old
		}
	})
}

// tagImageOnNodes tags image as newer on every node ($E2E_TAG_IMAGE,
// with $E2E_NODE, $E2E_IMAGE and $E2E_NEW_IMAGE), as a registry would
// serve a new tag.
func (s *suite) tagImageOnNodes(image, newer string) {
	s.t.Helper()
	nodes, err := s.kc.CoreV1().Nodes().List(s.ctx(), metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	tag := env("E2E_TAG_IMAGE", `../local/node.sh exec "${E2E_NODE##*-}" ctr -n k8s.io images tag --force "$E2E_IMAGE" "$E2E_NEW_IMAGE"`)
	for _, n := range nodes.Items {
		cmd := exec.Command("sh", "-c", tag)
		cmd.Env = append(os.Environ(), "E2E_NODE="+n.Name, "E2E_IMAGE="+fullRef(image), "E2E_NEW_IMAGE="+fullRef(newer))
		if out, err := cmd.CombinedOutput(); err != nil {
			s.t.Fatalf("tag the image on %s (%s): %v\n%s", n.Name, tag, err, out)
		}
	}
}

// setDriverImage changes the driver's image from image to newer where
// `helm upgrade --set image.tag=...` does (the node plugin's and the
// controller's containers, the mounter template) and waits for both to
// roll out.
func (s *suite) setDriverImage(image, newer string) {
	s.t.Helper()
	ctx := s.ctx()
	cms := s.kc.CoreV1().ConfigMaps(driverNS)
	cm, err := cms.Get(ctx, "objfuse-mounter", metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	cm.Data["mounter.yaml"] = strings.Replace(cm.Data["mounter.yaml"], "image: "+image+"\n", "image: "+newer+"\n", 1)
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	// The template first: the node plugins read it as they start.
	ds, err := s.kc.AppsV1().DaemonSets(driverNS).Get(ctx, "objfuse-node", metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	setImage(ds.Spec.Template.Spec.Containers, image, newer)
	if _, err := s.kc.AppsV1().DaemonSets(driverNS).Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	dep, err := s.kc.AppsV1().Deployments(driverNS).Get(ctx, "objfuse-controller", metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	setImage(dep.Spec.Template.Spec.Containers, image, newer)
	if _, err := s.kc.AppsV1().Deployments(driverNS).Update(ctx, dep, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.eventually(3*time.Minute, "the node plugins and the controller to roll out "+newer, func() (bool, error) {
		ds, err := s.kc.AppsV1().DaemonSets(driverNS).Get(ctx, "objfuse-node", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		dep, err := s.kc.AppsV1().Deployments(driverNS).Get(ctx, "objfuse-controller", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		d, r := ds.Status, dep.Status
		return d.ObservedGeneration >= ds.Generation && d.UpdatedNumberScheduled == d.DesiredNumberScheduled && d.NumberAvailable == d.DesiredNumberScheduled &&
			r.ObservedGeneration >= dep.Generation && r.UpdatedReplicas == *dep.Spec.Replicas && r.AvailableReplicas == *dep.Spec.Replicas && r.Replicas == r.UpdatedReplicas, nil
	})
}

// setImage changes the containers that run image to newer.
func setImage(cs []corev1.Container, image, newer string) {
	for i := range cs {
		if cs[i].Image == image {
			cs[i].Image = newer
		}
	}
}

// restarts is how often the mounter container restarted.
func restarts(p *corev1.Pod) int32 {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == spec.Container {
			return c.RestartCount
		}
	}
	return 0
}

// handedOver waits until the mounter pod asks for image and its
// container restarted since it had restarted before times, the old one
// having handed over: exit 75, saying so.
func (s *suite) handedOver(pod, image string, before int32) {
	s.t.Helper()
	s.eventually(3*time.Minute, "the mounter to hand over to "+image, func() (bool, error) {
		p, err := s.kc.CoreV1().Pods(driverNS).Get(s.ctx(), pod, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		// The spec's image: the status names the image by any of its
		// tags, and both tags are the same image here.
		if len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Image != image {
			return false, nil
		}
		for _, c := range p.Status.ContainerStatuses {
			last := c.LastTerminationState.Terminated
			if c.Name != spec.Container || c.RestartCount <= before || last == nil || c.State.Running == nil {
				continue
			}
			if last.ExitCode != 75 || !strings.Contains(last.Message, "handed the FUSE connection over") {
				s.t.Fatalf("the old container ended otherwise: exit %d, %q", last.ExitCode, last.Message)
			}
			return true, nil
		}
		return false, nil
	})
}

// eventMessage is the message of the latest Event on pod name whose
// message contains want.
func (s *suite) eventMessage(ns, name, want string) string {
	evs, err := s.kc.CoreV1().Events(ns).List(s.ctx(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	msg := ""
	for _, e := range evs.Items {
		if strings.Contains(e.Message, want) {
			msg = e.Message
		}
	}
	return msg
}

// fullRef is an image reference as containerd names it: a short name
// like objfuse:TAG is docker.io/library/objfuse:TAG.
func fullRef(ref string) string {
	if name, _, _ := strings.Cut(ref, ":"); !strings.Contains(name, "/") {
		return "docker.io/library/" + ref
	}
	return ref
}
