module github.com/hanwen/go-fuse/v2

require (
	github.com/moby/sys/mountinfo v0.7.2
	golang.org/x/sys v0.28.0
)

go 1.21
