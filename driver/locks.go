package driver

import "sync"

// keyLocks serialises operations on one key: a volume, a pair's mounter.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*sync.Mutex
}

func (k *keyLocks) lock(key string) func() {
	l := k.of(key)
	l.Lock()
	return l.Unlock
}

// tryLock is lock when key is free; ok is false when it is held.
func (k *keyLocks) tryLock(key string) (unlock func(), ok bool) {
	l := k.of(key)
	if !l.TryLock() {
		return nil, false
	}
	return l.Unlock, true
}

func (k *keyLocks) of(key string) *sync.Mutex {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]*sync.Mutex{}
	}
	l := k.m[key]
	if l == nil {
		l = &sync.Mutex{}
		k.m[key] = l
	}
	return l
}
