{{/*
The mounters' NetworkPolicy in one namespace mounters run in (the
driver's, and each of mounter.pvcNamespaces). Mounter pods take no
connection but Prometheus's, on their metrics port, from the namespace
mounter.metricsFrom names: their metrics name every tenant's bucket and
prefix. (The node plugin reaches a mounter through a Unix socket, which no
network policy concerns.) It selects pods by objfuse.csi.io/mounter, the
driver's own label, not by the common component label that others' pods
in a PVC's namespace may carry.
*/}}
{{- define "objfuse.mounterNetworkPolicy" -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: objfuse-mounter
  namespace: {{ .namespace }}
  labels:
    app.kubernetes.io/part-of: objfuse
spec:
  podSelector:
    matchExpressions:
      - {key: objfuse.csi.io/mounter, operator: Exists}
  policyTypes: [Ingress]
{{- if .Values.mounter.metrics }}
  ingress:
    - from:
        - namespaceSelector:
            matchLabels:
              kubernetes.io/metadata.name: {{ .Values.mounter.metricsFrom }}
      ports:
        - port: 9810
          protocol: TCP
{{- else }}
  ingress: []
{{- end }}
{{- end }}
