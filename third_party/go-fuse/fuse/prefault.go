package fuse

import "os"

// prefault writes to every page of a new read buffer, so that the pages
// are in memory before the kernel copies a request into them.
//
// The kernel takes a request off its queue before copying it into the
// reading thread's buffer. Should a page of the buffer have to be faulted
// in while the process is being killed (SIGKILL, or an exit while other
// threads wait in read), the copy fails and the kernel answers the
// request EIO itself. A request copied whole is instead on the list the
// kernel queues again at FUSE_NOTIFY_RESEND (Server.ResendNotify), so
// that a successor serving the same connection answers it. The copy into
// pages already present does not give up on a fatal signal. A new buffer
// may be memory the operating system has not handed over yet (the Go
// runtime does not write to fresh memory to clear it), so every new one
// is touched once.
func prefault(buf []byte) {
	page := os.Getpagesize()
	for i := 0; i < len(buf); i += page {
		buf[i] = 0
	}
}
