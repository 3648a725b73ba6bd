package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/objfuse/objfuse/fusefs/store"
	"github.com/objfuse/objfuse/fusefs/store/s3store"
	"github.com/objfuse/objfuse/test/miniotest"
)

func TestOperationNamesRequests(t *testing.T) {
	tests := []struct {
		method, target, want string
		header               http.Header
	}{
		{"GET", "/b/k", "GET", nil},
		{"GET", "/b/?list-type=2&prefix=a%2F&delimiter=%2F", "LIST", nil},
		{"GET", "/b/?prefix=a", "LIST", nil},
		{"GET", "/b/?location=", "GET", nil},
		{"HEAD", "/b/k", "HEAD", nil},
		{"PUT", "/b/k", "PUT", nil},
		{"PUT", "/b/k?partNumber=3&uploadId=u", "UPLOAD_PART", nil},
		{"PUT", "/b/k", "PUT_BATCH", http.Header{"X-Amz-Meta-Snowball-Auto-Extract": {"true"}}},
		{"POST", "/b/k?uploads=", "POST", nil},
		{"DELETE", "/b/k", "DELETE", nil},
		{"OPTIONS", "/b/k", "OTHER", nil},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.target, nil)
			maps.Copy(req.Header, tc.header)
			if got := s3store.Operation(req); got != tc.want {
				t.Errorf("Operation = %q, want %q", got, tc.want)
			}
		})
	}
}

// requestLog is a RequestObserver that keeps what it was told.
type requestLog struct {
	mu   sync.Mutex
	seen []string // "op status"
}

func (l *requestLog) observe(op, status string, took time.Duration) {
	if took <= 0 {
		panic("a request took no time")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, op+" "+status)
}

func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seen
	l.seen = nil
	return s
}

// Every request the store sends against a real server reaches the
// observer with what it did and how it ended, including the ranged GETs
// that go over the store's own connections and the HEAD of a missing key.
func TestObserverSeesEveryRequest(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	var log requestLog
	cfg := srv.Config()
	cfg.Observe = log.observe
	st := partStore(t, cfg, bucket)
	ctx := context.Background()
	data := bytes.Repeat([]byte("x"), 3*testPartSize/2)

	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"small put", func() error {
			_, err := st.Put(ctx, "small", bytes.NewReader(data[:10]), 10, nil)
			return err
		}, []string{"PUT 2xx"}},
		{"multipart put", func() error {
			_, err := st.Put(ctx, "big", bytes.NewReader(data), int64(len(data)), nil)
			return err
		}, []string{"POST 2xx", "UPLOAD_PART 2xx", "UPLOAD_PART 2xx", "POST 2xx"}},
		{"head", func() error { _, err := st.Head(ctx, "small"); return err }, []string{"HEAD 2xx"}},
		{"head of a missing key", func() error {
			if _, err := st.Head(ctx, "missing"); !errors.Is(err, store.ErrNotExist) {
				return errors.New("a missing key was found")
			}
			return nil
		}, []string{"HEAD 4xx"}},
		{"ranged get", func() error {
			r, err := st.Get(ctx, "big", store.AnyVersion, 1, 100)
			if err != nil {
				return err
			}
			defer r.Close()
			_, err = io.Copy(io.Discard, r)
			return err
		}, []string{"GET 2xx"}},
		{"list", func() error {
			for _, err := range st.List(ctx, "", "", false) {
				if err != nil {
					return err
				}
			}
			return nil
		}, []string{"LIST 2xx"}},
		{"delete", func() error { return st.Delete(ctx, "small") }, []string{"DELETE 2xx"}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		got := log.take()
		slices.Sort(got)
		want := slices.Clone(s.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: observed %q, want %q", s.name, got, want)
		}
	}

}

// A request that gets no answer is "failed"; one its caller gave up on
// while waiting is "canceled", not a fault of the endpoint; one whose
// deadline passed while the server sat on it is "timeout".
func TestObserverTellsFailedFromCanceled(t *testing.T) {
	arrived := make(chan struct{}, 1)
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	defer hang.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	const (
		none = iota
		cancel
		deadline
	)
	tests := []struct {
		name     string
		endpoint string
		stop     int
		want     string
	}{
		{"nothing listening", closed.URL, none, "HEAD failed"},
		{"caller gave up", hang.URL, cancel, "HEAD canceled"},
		{"deadline passed", hang.URL, deadline, "HEAD timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var log requestLog
			cfg := s3store.Config{Endpoint: tc.endpoint, Region: "us-east-1", PathStyle: true, MaxRetries: 1,
				Observe: log.observe, Keys: &s3store.Keys{AccessKeyID: "a", SecretAccessKey: "b"}}
			st, err := s3store.New(cfg, "bucket")
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			switch tc.stop {
			case cancel:
				go func() {
					<-arrived
					stop()
				}()
			case deadline:
				// Long enough to be sent, while the server sits on it.
				var expire context.CancelFunc
				ctx, expire = context.WithTimeout(ctx, time.Second)
				defer expire()
			}
			if _, err := st.Head(ctx, "k"); err == nil {
				t.Fatal("HEAD succeeded")
			}
			if got := log.take(); !slices.Equal(got, []string{tc.want}) {
				t.Errorf("observed %q, want [%s]", got, tc.want)
			}
		})
	}
}
