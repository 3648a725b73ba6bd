// Package inline is objfuse's CSI inline ephemeral volumes: a bucket (or
// a prefix of one) a pod declares in its own spec, with no PVC. Such a
// volume skips the admin's StorageClass, so the admin says here who may
// declare what: an allow-list of endpoints, buckets and prefixes per
// namespace (Rules). Without a rule for its namespace a pod's inline
// volume is refused, so a tenant can never point the driver at an
// arbitrary bucket or endpoint.
package inline
