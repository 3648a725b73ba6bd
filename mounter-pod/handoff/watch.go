package handoff

import (
	"context"
)

// AwaitClose connects to the mounter at socket and waits until the
// mounter closes the connection: when its process ends, or at the
// deadline Serve gives a connection that sends no request. It returns
// false if nothing listens (the mounter ended) or ctx ended, true when
// the mounter closed a connection it had taken: the caller connects
// again to tell a deadline from an end.
func AwaitClose(ctx context.Context, socket string) bool {
	conn, err := dialSocket(ctx, socket)
	if err != nil {
		return false
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()
	// Serve answers nothing to a connection that sends nothing: a read
	// returns only when the mounter closes it.
	var buf [512]byte
	for {
		if _, err := conn.Read(buf[:]); err != nil {
			return ctx.Err() == nil
		}
	}
}
