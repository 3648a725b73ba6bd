package driver

import "golang.org/x/sys/unix"

func closeFD(fd int) { unix.Close(fd) }
