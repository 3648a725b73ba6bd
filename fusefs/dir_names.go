package fusefs

import "strings"

// maxNameLen is the longest file name Linux accepts (NAME_MAX).
const maxNameLen = 255

// validName reports whether one path segment taken from a key can be shown
// as a file name. Keys with other segments ("a//b", "../x", "./y", NUL,
// over-long names) are hidden: showing them could alias another path or
// escape the mount.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= maxNameLen &&
		!strings.ContainsAny(name, "/\x00")
}

// childName returns the name an entry of a listing of dirKey stands for:
// its key or prefix with dirKey and a trailing "/" removed.
func childName(dirKey, keyOrPrefix string) (name string, isPrefix bool) {
	rest := strings.TrimPrefix(keyOrPrefix, dirKey)
	if strings.HasSuffix(rest, "/") {
		return strings.TrimSuffix(rest, "/"), true
	}
	return rest, false
}
