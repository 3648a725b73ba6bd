package main

import (
	"io"
	"strings"
	"testing"
)

// A flag that cannot work alone is refused with what it needs.
func TestCredentialsForVolumesNeedsADirectory(t *testing.T) {
	_, err := parse([]string{"--mode", "controller", "--s3-credentials-for-volumes"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--s3-credentials-dir") {
		t.Fatalf("--s3-credentials-for-volumes alone: %v, want an error naming --s3-credentials-dir", err)
	}
	if _, err := parse([]string{"--mode", "controller", "--s3-credentials-for-volumes", "--s3-credentials-dir", t.TempDir()}, io.Discard); err != nil {
		t.Fatalf("with a directory: %v", err)
	}
}

// Takeover is on unless turned off (the e2e turns it off to stand for a
// kernel that cannot resend).
func TestMountTakeoverIsOnByDefault(t *testing.T) {
	for args, want := range map[string]bool{"": true, "--mount-takeover=false": false, "--mount-takeover": true} {
		f, err := parse(append([]string{"--mode", "node"}, strings.Fields(args)...), io.Discard)
		if err != nil || f.opts.MountTakeover != want {
			t.Errorf("%q: takeover %v (%v), want %v", args, f != nil && f.opts.MountTakeover, err, want)
		}
	}
}

// --pvc-namespaces lists namespaces, once each, not the driver's own.
func TestPVCNamespacesFlag(t *testing.T) {
	f, err := parse([]string{"--mode", "controller", "--pvc-namespaces", "team-a, team-b"}, io.Discard)
	if err != nil || strings.Join(f.opts.PVCNamespaces, ",") != "team-a,team-b" {
		t.Fatalf("two namespaces: %v, %v", f, err)
	}
	for _, bad := range []string{"team-a,team-a", "objfuse-system", "Team_A"} {
		if _, err := parse([]string{"--mode", "controller", "--pvc-namespaces", bad}, io.Discard); err == nil || !strings.Contains(err.Error(), "--pvc-namespaces") {
			t.Errorf("--pvc-namespaces %q: %v, want an error naming the flag", bad, err)
		}
	}
}
