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
