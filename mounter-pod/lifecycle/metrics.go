package lifecycle

import "github.com/prometheus/client_golang/prometheus"

// metrics count what the periodic passes did.
type metrics struct {
	orphans prometheus.Counter
	// credentialUpdates counts mounter Secrets brought up to a rotated source.
	credentialUpdates prometheus.Counter
	// relaunches counts mounter pods started again for attached volumes.
	relaunches prometheus.Counter
	// attaches and detaches count the VolumeAttachments the controller
	// made and deleted for scheduled pods (attach.go).
	attaches, detaches prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		orphans: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "objfuse", Name: "orphaned_mounters_deleted_total", Help: "Mounter pods deleted for want of a VolumeAttachment.",
		}),
		relaunches: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "objfuse", Name: "mounters_relaunched_total", Help: "Mounter pods started again because an attached volume's pod was gone.",
		}),
		credentialUpdates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "objfuse", Name: "mounter_credential_updates_total", Help: "Mounter credential Secrets updated after their source Secret changed.",
		}),
		attaches: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "objfuse", Name: "volume_attachments_made_total", Help: "VolumeAttachments the controller made for a pod scheduled on a node that uses the volume.",
		}),
		detaches: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "objfuse", Name: "volume_attachments_deleted_total", Help: "VolumeAttachments the controller deleted once no pod on their node had used the volume for the detach grace.",
		}),
	}
}

func (m *metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.orphans, m.credentialUpdates, m.relaunches, m.attaches, m.detaches}
}

// Describe and Collect make Kube a prometheus.Collector of its passes'
// counters, which the driver serves with its own.
func (k *Kube) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range k.metrics.all() {
		c.Describe(ch)
	}
}

func (k *Kube) Collect(ch chan<- prometheus.Metric) {
	for _, c := range k.metrics.all() {
		c.Collect(ch)
	}
}
