// Package limits holds the filesystem's defaults that the mounter pod's
// spec needs too, apart from the filesystem itself: the CSI driver
// builds mounter pods and must not link a FUSE server to do it.
package limits

// DefaultStagingLimit is the bound on a mount's staging files, in bytes,
// when none is given.
const DefaultStagingLimit = 10 << 30
