package s3store

// IdleRawConns counts the connections s's ranged GETs keep for reuse.
func IdleRawConns(s *Store) int {
	s.raw.mu.Lock()
	defer s.raw.mu.Unlock()
	n := 0
	for _, cs := range s.raw.idle {
		n += len(cs)
	}
	return n
}

// HalfCloseIdleRawConns shuts the kept connections for writing, so the
// server closes them, as a server closing idle connections does.
func HalfCloseIdleRawConns(s *Store) {
	s.raw.mu.Lock()
	defer s.raw.mu.Unlock()
	for _, cs := range s.raw.idle {
		for _, c := range cs {
			c.conn.CloseWrite()
		}
	}
}

// SetMaxParts lowers S3's limit on parts, so that tests reach it cheaply.
func SetMaxParts(s *Store, n int) { s.maxParts = n }

// BatchSlots is how many small puts go out before the rest queue.
const BatchSlots = batchSlots

// QueuedPuts counts the puts waiting for a batch.
func QueuedPuts(s *Store) int {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return len(s.batch.queue)
}

// Batchable reports whether key may go in a batch.
func Batchable(key string) bool { return batchable(key) }
