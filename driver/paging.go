package driver

import (
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/objfuse/objfuse/volume"
)

// The paging of ListVolumes and ListSnapshots: entries in id order, and
// a token that is the last id returned, so that it stays valid when
// entries before it are deleted.

// checkPage checks a List call's paging: no negative size, and a token
// this driver made (the id of the last entry returned).
func checkPage(maxEntries int32, token, call string) error {
	if maxEntries < 0 {
		return status.Error(codes.InvalidArgument, "max_entries may not be negative")
	}
	if token != "" {
		if _, err := volume.ParseID(token); err != nil {
			return status.Errorf(codes.Aborted, "starting token %q was not made by this driver's %s", token, call)
		}
	}
	return nil
}

// pageOf orders items by id and returns those after token, at most
// maxEntries of them (all when 0), and the token for the next page ("" at
// the end).
func pageOf[T any](items []T, id func(T) string, token string, maxEntries int32) ([]T, string) {
	sort.Slice(items, func(i, j int) bool { return id(items[i]) < id(items[j]) })
	if token != "" {
		items = items[sort.Search(len(items), func(i int) bool { return id(items[i]) > token }):]
	}
	if n := int(maxEntries); n > 0 && len(items) > n {
		items = items[:n]
		return items, id(items[n-1])
	}
	return items, ""
}
