package fusefs

import (
	"testing"
	"time"
)

// A move holds back the changes it covers, and only those, until done;
// it waits for the changes under it already in flight.
func TestKeyGateHoldsBackWhatAMoveCovers(t *testing.T) {
	g := newKeyGate()
	done := g.move("a/", "b")
	for _, k := range []string{"ab", "a", "c/a/", "b/"} { // not covered: at once
		g.enter(k)()
	}
	entered := make(chan string, 3)
	for _, k := range []string{"a/x", "a/", "b"} {
		go func() {
			leave := g.enter(k)
			entered <- k
			leave()
		}()
	}
	waitFor(t, "three changes held back", func() bool { return g.heldBack() == 3 })
	select {
	case k := <-entered:
		t.Fatalf("%q entered during the move", k)
	default:
	}
	done()
	for range 3 {
		<-entered
	}

	leave := g.enter("d/x")
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		g.move("d/")()
	}()
	waitFor(t, "the move to wait", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.inside) == 1
	})
	select {
	case <-moved:
		t.Fatal("the move did not wait for the change in flight under it")
	case <-time.After(10 * time.Millisecond): // a chance to go wrong, not a wait for success
	}
	leave()
	<-moved
}

// Two renames in opposite directions (a to b, b to a) each take both
// their prefixes at once: neither holds one while waiting for the other.
func TestKeyGateOppositeMovesDoNotDeadlock(t *testing.T) {
	g := newKeyGate()
	finished := make(chan struct{}, 200)
	for i := range 200 {
		from, to := "a/", "b/"
		if i%2 == 1 {
			from, to = to, from
		}
		go func() {
			g.move(from, to)()
			finished <- struct{}{}
		}()
	}
	deadline := time.After(time.Minute)
	for range 200 {
		select {
		case <-finished:
		case <-deadline:
			t.Fatal("moves deadlocked")
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); <-time.After(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
