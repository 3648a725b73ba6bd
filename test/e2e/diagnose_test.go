//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// diagnose logs, for a failed test, what its cause would be found in:
// the Events of its namespace and of the driver's (the last ten
// minutes), the mounter pods' containers, and the node plugins' and the
// controller's last lines. A failure in CI is then explained by its log.
// Each request has a deadline: a node the test stopped does not answer
// for its logs, and the diagnosis must not hide the failure it explains.
func (s *suite) diagnose() {
	s.diagnosed = true
	ctx, cancel := context.WithTimeout(s.ctx(), time.Minute)
	defer cancel()
	since := time.Now().Add(-10 * time.Minute)
	for _, ns := range []string{s.ns, driverNS} {
		evs, err := s.kc.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			s.t.Logf("diagnose: events of %s: %v", ns, err)
			continue
		}
		sort.Slice(evs.Items, func(i, j int) bool { return eventTime(evs.Items[i]).Before(eventTime(evs.Items[j])) })
		var b strings.Builder
		for _, e := range evs.Items {
			if eventTime(e).After(since) && !routine[e.Reason] {
				fmt.Fprintf(&b, "\n  %s %s %s/%s %s: %s", eventTime(e).Format("15:04:05"), e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
		s.t.Logf("diagnose: events of %s:%s", ns, b.String())
	}
	pods, err := s.kc.CoreV1().Pods(driverNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Logf("diagnose: pods of %s: %v", driverNS, err)
		return
	}
	for _, p := range pods.Items {
		var b strings.Builder
		for _, c := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "\n  %s restarts=%d state=%s last=%s", c.Name, c.RestartCount, containerState(c.State), containerState(c.LastTerminationState))
		}
		s.t.Logf("diagnose: pod %s on %s, image %s, phase %s:%s", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image, p.Status.Phase, b.String())
		if strings.HasPrefix(p.Name, "objfuse-node-") || strings.HasPrefix(p.Name, "objfuse-controller-") {
			tail := int64(400)
			lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
			out, err := s.kc.CoreV1().Pods(driverNS).GetLogs(p.Name, &corev1.PodLogOptions{Container: p.Spec.Containers[0].Name, TailLines: &tail}).DoRaw(lctx)
			lcancel()
			if err != nil {
				s.t.Logf("diagnose: logs of %s: %v", p.Name, err)
				continue
			}
			var keep []string
			for _, line := range strings.Split(string(out), "\n") {
				if line != "" && !strings.Contains(line, `"level":"DEBUG"`) && !strings.Contains(line, `"code":"OK"`) {
					keep = append(keep, line)
				}
			}
			keep = keep[max(0, len(keep)-40):]
			s.t.Logf("diagnose: last lines of %s:\n  %s", p.Name, strings.Join(keep, "\n  "))
		}
	}
}

// routine are the reasons of Events that say only what went as planned.
var routine = map[string]bool{"Pulled": true, "Created": true, "Scheduled": true, "Started": true,
	"SuccessfulCreate": true, "SuccessfulDelete": true, "ScalingReplicaSet": true}

func eventTime(e corev1.Event) time.Time {
	for _, t := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time, e.CreationTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

func containerState(st corev1.ContainerState) string {
	switch {
	case st.Running != nil:
		return "running since " + st.Running.StartedAt.Format("15:04:05")
	case st.Waiting != nil:
		return "waiting: " + st.Waiting.Reason + ": " + st.Waiting.Message
	case st.Terminated != nil:
		return fmt.Sprintf("exited %d at %s: %s", st.Terminated.ExitCode, st.Terminated.FinishedAt.Format("15:04:05"), strings.TrimSpace(st.Terminated.Message))
	}
	return "none"
}
