package lifecycle

import "github.com/prometheus/client_golang/prometheus"

// metrics count what the periodic passes did.
type metrics struct {
	orphans prometheus.Counter
	// credentialUpdates counts mounter Secrets brought up to a rotated source.
	credentialUpdates prometheus.Counter
	// relaunches counts mounter pods started again for attached volumes.
	relaunches prometheus.Counter
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
	}
}

func (m *metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.orphans, m.credentialUpdates, m.relaunches}
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
