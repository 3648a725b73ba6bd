package driver

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

type metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	repairs  prometheus.Counter
	abnormal prometheus.Gauge
	// takeovers and takeoverFallbacks count connections handed to a
	// successor mounter, and the ones that could not be (and were
	// repaired instead); survival is each staged volume's survival mode.
	takeovers         prometheus.Counter
	takeoverFallbacks prometheus.Counter
	survival          *prometheus.GaugeVec
	// upgrades counts running mounters upgraded in place, by result.
	upgrades *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "objfuse", Name: "csi_calls_total", Help: "CSI calls by method and gRPC code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "objfuse", Name: "csi_call_duration_seconds", Help: "CSI call latency.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"method"}),
		repairs: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "objfuse", Name: "mount_repairs_total", Help: "FUSE mounts rebuilt after their mounter restarted.",
		}),
		abnormal: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "objfuse", Name: "abnormal_volumes", Help: "Staged volumes whose mount does not answer, or whose S3 requests fail for a reason a person must fix (refused credentials, a deleted bucket, an endpoint gone).",
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "objfuse", Name: "mount_takeovers_total", Help: "FUSE connections kept by the node plugin and handed to a restarted mounter, which resumed them: the pods saw a pause, not an error.",
		}),
		takeoverFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "objfuse", Name: "mount_takeover_fallbacks_total", Help: "FUSE connections kept by the node plugin that no successor mounter could take over: aborted and repaired instead (see the ObjfuseTakeoverFailed Events).",
		}),
		survival: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "objfuse", Name: "volume_survival_mode", Help: "1 for the way each staged volume's mount survives its mounter: takeover (the connection outlives it, pods see a pause) or repair (mounted again, only HostToContainer pods see it back), as its mounter last said and the node plugin can do.",
		}, []string{"volume", "mode"}),
		upgrades: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "objfuse", Name: "mounter_upgrades_total", Help: "Running mounters the node plugin upgraded in place to the driver's image, by result: handed_over (the new image serves the connection; pods saw a pause) or failed (see the ObjfuseMounterUpgradeFailed Events).",
		}, []string{"result"}),
	}
	m.reg.MustRegister(m.calls, m.duration, m.repairs, m.abnormal, m.takeovers, m.takeoverFallbacks, m.survival, m.upgrades,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// volumeRequest is every CSI request that names a volume.
type volumeRequest interface{ GetVolumeId() string }

// intercept logs one line per CSI call (method, volume, duration, code;
// never the request, which may hold secrets) and counts it.
func (d *Driver) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	took := time.Since(start)
	code := status.Code(err)
	d.metrics.calls.WithLabelValues(info.FullMethod, code.String()).Inc()
	d.metrics.duration.WithLabelValues(info.FullMethod).Observe(took.Seconds())
	attrs := []any{"method", info.FullMethod, "took", took.Round(time.Microsecond), "code", code.String()}
	if v, ok := req.(volumeRequest); ok && v.GetVolumeId() != "" {
		attrs = append(attrs, "volume", v.GetVolumeId())
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, "err", status.Convert(err).Message())
	}
	d.log.Log(ctx, level, "csi call", attrs...)
	return resp, err
}

// ServeHealth serves /healthz (the CSI socket answers Probe) and /metrics
// on addr until ctx ends.
func (d *Driver) ServeHealth(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		resp, err := d.identity.Probe(r.Context(), nil)
		if err != nil || !resp.GetReady().GetValue() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go srv.Serve(l)
	return nil
}
