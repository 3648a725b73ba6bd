package fusefs_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/objfuse/objfuse/fusefs"
	"github.com/objfuse/objfuse/fusefs/store/memstore"
)

// A panic in a FUSE handler is answered EIO and logged with the stack
// that panicked: the panic's value alone does not say where.
func TestHandlerPanicLogsStack(t *testing.T) {
	var logged bytes.Buffer
	f, err := fusefs.New(memstore.New(), fusefs.Options{PartSize: 5 << 20, StagingDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	handle := f.MountOptions("objfuse:test").PanicHandler
	var status fuse.Status
	// As go-fuse calls it: from a deferred recover around the handler.
	func() {
		defer func() {
			if r := recover(); r != nil {
				status = handle(r)
			}
		}()
		panickingHandler()
	}()
	if status != fuse.EIO {
		t.Errorf("status %v, want EIO", status)
	}
	out := logged.String()
	if !strings.Contains(out, "boom") || !strings.Contains(out, "stack=") || !strings.Contains(out, "panickingHandler") {
		t.Errorf("the log does not give the panic and the stack it came from:\n%s", out)
	}
}

func panickingHandler() { panic("boom") }
