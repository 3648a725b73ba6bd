package spec

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/objfuse/objfuse/fusefs/limits"
	"github.com/objfuse/objfuse/volume"
)

// Labels and annotations objfuse puts on mounter pods and Secrets.
const (
	LabelComponent   = "app.kubernetes.io/component"
	ComponentMounter = "mounter"
	LabelKey         = "objfuse.csi.io/mounter"
	LabelNode        = "objfuse.csi.io/node"
	AnnotationVolume = "objfuse.csi.io/volume-id"
	AnnotationNode   = "objfuse.csi.io/node-id"
	// AnnotationReadOnly tells a repeated publish whether it matches.
	AnnotationReadOnly = "objfuse.csi.io/read-only"
	// AnnotationForPod marks the mounter of an inline volume with the
	// pod that declared it (Mounter.ForPod); no VolumeAttachment counts it.
	AnnotationForPod = "objfuse.csi.io/for-pod"
)

// Selector selects mounter pods and their Secrets: those with LabelKey.
// Not LabelComponent, which pods of others use too, in the namespaces of
// PVCs where mounters may run.
const Selector = LabelKey

// Container is the name of the mounter pod's one container, whose image
// the node plugin changes in place to upgrade a running mounter.
const Container = "mounter"

// MounterUID is the unprivileged user the mounter runs as ("nobody").
const MounterUID = 65534

// MetricsPort is where a mounter pod serves Prometheus /metrics (upload
// errors, S3 request latencies), on its pod IP, unless the template says
// NoMetrics. Mounters on the host network serve none: one fixed port
// would clash between them.
const MetricsPort = 9810

// Template is the driver's mounter pod configuration (mounter.yaml).
type Template struct {
	Image             string                      `json:"image"`
	ImagePullPolicy   corev1.PullPolicy           `json:"imagePullPolicy,omitempty"`
	PriorityClassName string                      `json:"priorityClassName,omitempty"`
	Resources         corev1.ResourceRequirements `json:"resources,omitempty"`
	Labels            map[string]string           `json:"labels,omitempty"`
	Tolerations       []corev1.Toleration         `json:"tolerations,omitempty"`
	// HostNetwork lets mounters reach an S3 endpoint only the host can
	// (a cluster without kube-proxy, or S3 on a node-local address).
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// NoMetrics turns the mounters' metrics port (MetricsPort) off.
	NoMetrics bool `json:"noMetrics,omitempty"`
	// StagingSizeLimit bounds the emptyDir for randomly written files.
	StagingSizeLimit string `json:"stagingSizeLimit,omitempty"`
	// TerminationGracePeriodSeconds is how long a mounter may drain.
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

// ParseTemplate reads mounter.yaml, rejecting unknown fields so a typo is an error.
func ParseTemplate(data []byte) (Template, error) {
	var t Template
	if err := yaml.UnmarshalStrict(data, &t); err != nil {
		return Template{}, fmt.Errorf("mounter template: %w", err)
	}
	if t.Image == "" {
		return Template{}, fmt.Errorf("mounter template: no image")
	}
	if t.StagingSizeLimit != "" {
		if _, err := resource.ParseQuantity(t.StagingSizeLimit); err != nil {
			return Template{}, fmt.Errorf("mounter template: stagingSizeLimit: %w", err)
		}
	}
	return t, nil
}

// PodName is the mounter pod's name for m.
func (m Mounter) PodName() string { return "objfuse-mounter-" + m.Key() }

// SecretName is the name of the Secret holding m's credentials.
func (m Mounter) SecretName() string { return m.PodName() + "-creds" }

// Pod builds the mounter pod for m on the node whose kubernetes.io/hostname
// label is hostname. It runs as nobody with no privilege and no
// capabilities; credentials come only from the Secret, mounted as files.
func (t Template) Pod(m Mounter, namespace, hostname string) (*corev1.Pod, error) {
	res := *t.Resources.DeepCopy()
	if err := overrideResources(&res, m); err != nil {
		return nil, err
	}
	env := []corev1.EnvVar{}
	mem, memLimited := res.Limits[corev1.ResourceMemory]
	if memLimited {
		env = append(env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: strconv.FormatInt(goMemLimit(mem.Value()), 10)})
	}
	labels := map[string]string{}
	for k, v := range t.Labels {
		labels[k] = v
	}
	labels[LabelComponent] = ComponentMounter
	labels[LabelKey] = m.Key()
	labels[LabelNode] = nodeLabel(m.NodeID)
	tolerations := t.Tolerations
	if len(tolerations) == 0 {
		tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	grace := t.TerminationGracePeriodSeconds
	if grace == nil {
		grace = ptr.To[int64](60)
	}
	args := m.Args(SocketPath, CredentialsDir, StagingDir)
	args = BeforeSource(args, "--drain-timeout="+drainTimeout(*grace).String())
	if memLimited {
		args = BeforeSource(args, memoryFlags(mem.Value()>>20, m.Volume.Mount)...)
	}
	if m.ForPod != "" {
		// Released, an inline volume's mounter is done: its pod is.
		args = BeforeSource(args, "--exit-when-released")
	}
	if limit, cache, bounded, err := t.stagingLimitMiB(res, m); err != nil {
		return nil, err
	} else if bounded {
		args = BeforeSource(args, fmt.Sprintf("--staging-limit-mib=%d", limit))
		if _, set := m.Volume.Mount[volume.ParamReadCacheMiB]; !set {
			args = BeforeSource(args, fmt.Sprintf("--read-cache-mib=%d", cache))
		}
	}
	annotations := map[string]string{AnnotationVolume: m.VolumeID, AnnotationNode: m.NodeID, AnnotationReadOnly: strconv.FormatBool(m.ReadOnly)}
	if m.ForPod != "" {
		annotations[AnnotationForPod] = m.ForPod
	}
	var ports []corev1.ContainerPort
	if !t.HostNetwork && !t.NoMetrics {
		args = BeforeSource(args, fmt.Sprintf("--metrics-addr=:%d", MetricsPort))
		ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP}}
		annotations["prometheus.io/scrape"] = "true"
		annotations["prometheus.io/port"] = strconv.Itoa(MetricsPort)
	}
	staging := &corev1.EmptyDirVolumeSource{}
	if t.StagingSizeLimit != "" {
		q := resource.MustParse(t.StagingSizeLimit)
		staging.SizeLimit = &q
	}
	pull := t.ImagePullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        m.PodName(),
			Namespace:   namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			NodeSelector:      map[string]string{corev1.LabelHostname: hostname},
			Tolerations:       tolerations,
			PriorityClassName: t.PriorityClassName,
			// Exit 0 is a finished mounter (told to exit after NodeUnstage);
			// anything else is a crash the node plugin repairs after a restart.
			RestartPolicy:                 corev1.RestartPolicyOnFailure,
			HostNetwork:                   t.HostNetwork,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](MounterUID),
				RunAsGroup:     ptr.To[int64](MounterUID),
				FSGroup:        ptr.To[int64](MounterUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            Container,
				Image:           t.Image,
				ImagePullPolicy: pull,
				Command:         []string{"/objfuse-mount"},
				Args:            args,
				Ports:           ports,
				Env:             env,
				Resources:       res,
				// No liveness probe: restarting a mounter breaks its mounts.
				// Readiness is for people (kubectl get pods): nothing
				// waits on it, so it is asked seldom: each probe costs
				// the node a runc exec and a process, for every mounter.
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/objfuse-mount", "--probe", SocketPath}}},
					PeriodSeconds:    10,
					TimeoutSeconds:   5,
					FailureThreshold: 3,
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{
					Privileged:               ptr.To(false),
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					RunAsNonRoot:             ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: socketVolume, MountPath: SocketDir},
					{Name: credentialsVolume, MountPath: CredentialsDir, ReadOnly: true},
					{Name: stagingVolume, MountPath: StagingDir},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: socketVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: credentialsVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: m.SecretName(), DefaultMode: ptr.To[int32](0o400),
				}}},
				{Name: stagingVolume, VolumeSource: corev1.VolumeSource{EmptyDir: staging}},
			},
		},
	}, nil
}

// Secret builds the Secret with m's credentials, owned by pod so that it
// goes when the pod goes.
func (m Mounter) Secret(pod *corev1.Pod, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      m.SecretName(),
			Namespace: pod.Namespace,
			Labels:    map[string]string{LabelComponent: ComponentMounter, LabelKey: m.Key()},
			OwnerReferences: []metav1.OwnerReference{{
				// No BlockOwnerDeletion: it would need pods/finalizers
				// rights where OwnerReferencesPermissionEnforcement runs.
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// BeforeSource adds flags to an objfuse-mount command line: before the
// source, its last argument.
func BeforeSource(args []string, flags ...string) []string {
	last := len(args) - 1
	return append(append(args[:last:last], flags...), args[last])
}

// stagingLimitMiB is how much objfuse-mount may keep in its staging
// emptyDir when the pod bounds that (the template's stagingSizeLimit, or
// an ephemeral-storage limit, the smaller): a tenth (at least 64 MiB) for
// logs and slack, and the read cache's share, come off, and the result
// never exceeds objfuse-mount's own default. Past its limit objfuse-mount
// answers writers ENOSPC; past the pod's, kubelet would evict the pod,
// and the mount would break. The read cache is the volume's
// readCacheMiB, or by default objfuse-mount's, but no more than a quarter
// of what the bound leaves. bounded is false when nothing bounds the
// emptyDir (a zero sizeLimit is none, as for kubelet).
func (t Template) stagingLimitMiB(res corev1.ResourceRequirements, m Mounter) (limit, cache int64, bounded bool, err error) {
	var bound resource.Quantity
	what := ""
	if t.StagingSizeLimit != "" {
		if q := resource.MustParse(t.StagingSizeLimit); q.Sign() > 0 {
			bound, what = q, "stagingSizeLimit "+q.String()
		}
	}
	if q, ok := res.Limits[corev1.ResourceEphemeralStorage]; ok && q.Sign() > 0 && (what == "" || q.Cmp(bound) < 0) {
		bound, what = q, "ephemeral-storage limit "+q.String()
	}
	if what == "" {
		return 0, 0, false, nil
	}
	boundMiB := bound.Value() >> 20
	usableMiB := boundMiB - max(boundMiB/10, stagingSlackMiB)
	cache = m.Volume.Mount.Int(volume.ParamReadCacheMiB)
	if _, set := m.Volume.Mount[volume.ParamReadCacheMiB]; !set {
		cache = min(cache, max(usableMiB/4, 0), max(usableMiB-minStagingMiB, 0))
	}
	limit = usableMiB - cache
	if limit < minStagingMiB {
		return 0, 0, false, fmt.Errorf("%w: the mounter's %s leaves %d MiB for staging files beside readCacheMiB %d, and at least %d are needed: raise it, or set readCacheMiB to at most %d",
			ErrUnfit, what, max(limit, 0), cache, minStagingMiB, max(usableMiB-minStagingMiB, 0))
	}
	return min(limit, limits.DefaultStagingLimit>>20), cache, true, nil
}

// ErrUnfit: the mounter template and the volume's parameters do not fit
// together; no retry mends that.
var ErrUnfit = errors.New("no mounter fits")

const (
	// minStagingMiB is the least staging space a mounter is started with.
	minStagingMiB = 64
	// stagingSlackMiB is the least left over for logs beside the staging
	// and read cache files: kubelet keeps up to 5 container logs of 10 MiB.
	stagingSlackMiB = 64
)

func overrideResources(res *corev1.ResourceRequirements, m Mounter) error {
	if v := m.Volume.Mounter.MemoryLimit; v != "" {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("mounterMemoryLimit %q: %w", v, err)
		}
		if res.Limits == nil {
			res.Limits = corev1.ResourceList{}
		}
		res.Limits[corev1.ResourceMemory] = q
		if req, ok := res.Requests[corev1.ResourceMemory]; ok && req.Cmp(q) > 0 {
			res.Requests[corev1.ResourceMemory] = q
		}
	}
	if v := m.Volume.Mounter.CPURequest; v != "" {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("mounterCPURequest %q: %w", v, err)
		}
		if res.Requests == nil {
			res.Requests = corev1.ResourceList{}
		}
		res.Requests[corev1.ResourceCPU] = q
	}
	return nil
}

// nodeLabel makes a node name fit a label value (at most 63 characters,
// starting and ending with a letter or digit): long names become a hash.
func nodeLabel(node string) string {
	if len(node) <= 63 {
		return node
	}
	return "node-" + volume.Key(node)
}

// drainTimeout is how long a mounter whose pod is deleted gives pending
// uploads: its grace period less the time to report what was not
// uploaded (the node plugin asks every 5 s) before the kubelet kills it.
func drainTimeout(graceSeconds int64) time.Duration {
	grace := time.Duration(graceSeconds) * time.Second
	if grace > 20*time.Second {
		return grace - 10*time.Second
	}
	return max(grace/2, time.Second)
}
