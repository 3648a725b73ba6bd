package driver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/objfuse/objfuse/fusefs/store/s3store"
)

// copies are the server-side copies under way: a snapshot being taken, a
// volume being filled from a snapshot or another volume. Each runs once
// at a time, in the background, so that the CSI call that started it can
// answer (not ready yet, and how far it came) and a repeated call finds
// it; a controller restarted in the middle starts it again from what the
// record says, and the copy skips what is already there.
type copies struct {
	mu   sync.Mutex
	jobs map[string]*copyJob
}

type copyJob struct {
	done   chan struct{}
	err    error // once done
	cancel context.CancelFunc

	mu           sync.Mutex
	total, sofar s3store.CopyProgress
}

// counts are what the job counted to copy, and copied so far.
func (j *copyJob) counts() (total, sofar s3store.CopyProgress) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.total, j.sofar
}

// progress says how far the job came, for messages.
func (j *copyJob) progress() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return fmt.Sprintf("%d of %d objects (%d of %d MiB)", j.sofar.Objects, j.total.Objects, j.sofar.Bytes>>20, j.total.Bytes>>20)
}

// start runs copy under key unless it runs already, and returns the job.
// A job that failed stays until a caller gets it (and returns its error),
// then is forgotten, so that the next call starts it again.
func (c *copies) start(key string, copy func(ctx context.Context, j *copyJob) error) *copyJob {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil {
		c.jobs = map[string]*copyJob{}
	}
	if j, ok := c.jobs[key]; ok {
		select {
		case <-j.done:
			delete(c.jobs, key) // failed: this caller reports it
		default:
		}
		return j
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &copyJob{done: make(chan struct{}), cancel: cancel}
	c.jobs[key] = j
	go func() {
		defer cancel()
		j.err = copy(ctx, j)
		c.mu.Lock()
		if j.err == nil {
			delete(c.jobs, key)
		}
		c.mu.Unlock()
		close(j.done)
	}()
	return j
}

// stop ends the job under key, if one runs, and waits for its end: what
// it copies is about to be removed, and it must not copy on (nor record)
// into what is gone.
func (c *copies) stop(key string) {
	c.mu.Lock()
	j, ok := c.jobs[key]
	c.mu.Unlock()
	if ok {
		j.cancel()
		<-j.done
		c.mu.Lock()
		if c.jobs[key] == j {
			delete(c.jobs, key)
		}
		c.mu.Unlock()
	}
}

// copyTree is a job's copy: it counts src, then copies it to dst.
func copyTree(ctx context.Context, a *s3store.Admin, src, dst s3store.Tree, j *copyJob) error {
	total, err := a.Size(ctx, src)
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.total = total
	j.mu.Unlock()
	return a.CopyTree(ctx, src, dst, func(p s3store.CopyProgress) {
		j.mu.Lock()
		j.sofar = p
		j.mu.Unlock()
	})
}

// waitBriefly waits up to d for j, so that a small copy is answered as
// done by the call that started it. It says whether j is done.
func (j *copyJob) waitBriefly(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-j.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}
