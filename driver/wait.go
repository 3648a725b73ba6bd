package driver

import (
	"context"
	"time"
)

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, every time.Duration, cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(every):
		}
	}
}
