package driver_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/objfuse/objfuse/mounter-pod/spec"
	"github.com/objfuse/objfuse/test/csitest"
	"github.com/objfuse/objfuse/volume"
)

// With takeover on, the node keeps the kernel's connection: a killed
// mounter leaves its mount hung, not dead (requests wait). The restarted
// mounter of this tree cannot resume it, so the node falls back: aborts
// the connection, mounts again, and tells the pod both why there was no
// takeover and that the volume was mounted again. Real FUSE, real
// handles, a real mounter process.
func TestKilledMounterThatCannotResumeIsRepaired(t *testing.T) {
	events := &podEvents{}
	env := csitest.Start(t, csitest.Options{ReconcileEvery: time.Second, MountTakeover: true, Events: events})
	staging, target := filepath.Join(env.Dir, "staging"), filepath.Join(env.Dir, "target")
	// A mounter that keeps nothing for a successor (takeover "false"), as
	// one on a kernel that cannot resend.
	id, _ := publishedVolumeWith(t, env, "pvc-keep", map[string]string{volume.ParamTakeover: "false"}, staging, map[string]bool{target: false})
	data := bytes.Repeat([]byte("kept\n"), 100)
	if err := os.WriteFile(filepath.Join(target, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	m := spec.Mounter{VolumeID: id, NodeID: csitest.NodeID}
	pid := env.Launcher.PID(m)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	took := poll(t, 60*time.Second, "repaired with both Events", func() bool {
		// A read may wait on the kept connection until it is aborted:
		// bounded here, never a blocked test.
		done := make(chan bool, 1)
		go func() {
			b, err := os.ReadFile(filepath.Join(target, "f"))
			done <- err == nil && bytes.Equal(b, data)
		}()
		select {
		case ok := <-done:
			return ok && len(events.with("ObjfuseMountRepaired")) == 1 && len(events.with("ObjfuseTakeoverFailed")) == 1
		case <-time.After(500 * time.Millisecond):
			return false
		}
	})
	if why := events.with("ObjfuseTakeoverFailed")[0].message; !strings.Contains(why, "cannot resume") {
		t.Fatalf("takeover failed Event: %q, want it to say the mounter cannot resume", why)
	}
	t.Logf("repaired %s after the mounter was killed (pid %d → %d)", took, pid, env.Launcher.PID(m))
}

// A killed mounter's successor takes the kept connection over without
// waiting for a periodic check (an hour apart here): the node hears the
// mounter end on the connection it keeps open to its socket, and checks
// often until the successor serves. What was written before is read
// back through the same target; the pod gets the takeover's Event.
func TestKilledMounterIsTakenOverBeforeTheNextCheck(t *testing.T) {
	events := &podEvents{}
	env := csitest.Start(t, csitest.Options{ReconcileEvery: time.Hour, MountTakeover: true, Events: events})
	staging, target := filepath.Join(env.Dir, "staging"), filepath.Join(env.Dir, "target")
	id, _ := publishedVolumeWith(t, env, "pvc-watch", nil, staging, map[string]bool{target: false})
	data := bytes.Repeat([]byte("kept\n"), 100)
	if err := os.WriteFile(filepath.Join(target, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	m := spec.Mounter{VolumeID: id, NodeID: csitest.NodeID}
	pid := env.Launcher.PID(m)
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The read waits on the kept connection until the successor serves
	// (bounded here: a node that missed the end would leave it waiting
	// an hour).
	read := make(chan error, 1)
	go func() {
		b, err := os.ReadFile(filepath.Join(target, "f"))
		if err == nil && !bytes.Equal(b, data) {
			err = fmt.Errorf("read %d bytes, not what was written", len(b))
		}
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("read after the kill: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a read after the kill still waits 30 s later")
	}
	took := time.Since(killed)
	poll(t, 10*time.Second, "the takeover's Event", func() bool {
		return len(events.with("ObjfuseMountTakenOver")) == 1
	})
	if n := len(events.with("ObjfuseMountRepaired")); n != 0 {
		t.Fatalf("%d repairs, want none", n)
	}
	t.Logf("a read answered %s after the kill (pid %d → %d)", took.Round(time.Millisecond), pid, env.Launcher.PID(m))
}
