package lifecycle

import "k8s.io/client-go/util/workqueue"

// work starts n workers that sync the keys of queue until it is shut
// down, one key at a time each (the queue never hands a key to two). A
// key whose sync fails is told to failed and retried with back-off.
func work[K comparable](n int, queue workqueue.TypedRateLimitingInterface[K], sync func(K) error, failed func(K, error)) {
	for range n {
		go func() {
			for workOne(queue, sync, failed) {
			}
		}()
	}
}

// workOne syncs one key of queue; false once the queue is shut down.
func workOne[K comparable](queue workqueue.TypedRateLimitingInterface[K], sync func(K) error, failed func(K, error)) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	if err := sync(key); err != nil {
		failed(key, err)
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	return true
}
