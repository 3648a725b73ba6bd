//go:build race

package main

// Under -race, the mounts the tests start are built with it too.
func init() { buildFlags = append(buildFlags, "-race") }
