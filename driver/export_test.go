package driver

import "github.com/container-storage-interface/spec/lib/go/csi"

// Controller is d's controller server, for tests that call it directly.
func Controller(d *Driver) csi.ControllerServer { return d.controller }

// Node is d's node server, for tests that call it directly.
func Node(d *Driver) csi.NodeServer { return d.node }
