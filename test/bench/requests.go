package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// counter is a reverse proxy in front of MinIO that counts the S3
// requests passing through it by kind, so that each row can say how many
// requests each filesystem needed (-count-requests). SigV4 signs the Host
// header, which the proxy passes on unchanged.
type counter struct {
	mu     sync.Mutex
	counts map[string]int
	paused bool
	srv    *http.Server
	addr   string
}

func startCounter(target string) (*counter, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &counter{counts: map[string]int{}, addr: l.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute}
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0) // cancelled requests are the clients' business
	// objfuse-mount's start-up check lists the bucket with max-keys=1,
	// cancels on the first entry and takes minio-go's "context canceled"
	// for the follow-up page as an unreachable endpoint; behind this extra
	// hop it loses that race every time. While a mount starts, say the
	// first page is the last. Nothing of a row's work is touched.
	rp.ModifyResponse = func(resp *http.Response) error {
		if !c.isPaused() || resp.StatusCode != http.StatusOK || resp.Request.URL.Query().Get("max-keys") != "1" {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		body = bytes.Replace(body, []byte("<IsTruncated>true</IsTruncated>"), []byte("<IsTruncated>false</IsTruncated>"), 1)
		body = nextToken.ReplaceAll(body, nil)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	c.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := kindOf(r)
		c.mu.Lock()
		if !c.paused {
			c.counts[k]++
		}
		c.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go c.srv.Serve(l)
	return c, nil
}

// kindOf names an S3 request: LIST, HEAD, GET, GET-range, PUT, PUT-part,
// COPY, MPU-create, MPU-complete, MPU-abort, DELETE...
func kindOf(r *http.Request) string {
	q := r.URL.Query()
	path := strings.Trim(r.URL.Path, "/")
	bucketOnly := !strings.Contains(path, "/")
	switch r.Method {
	case http.MethodGet:
		switch {
		case bucketOnly && (q.Has("list-type") || q.Has("prefix") || q.Has("delimiter")):
			return "LIST"
		case bucketOnly && q.Has("uploads"):
			return "LIST-uploads"
		case bucketOnly:
			return "GET-bucket?" + strings.Join(keys(q), ",")
		case r.Header.Get("Range") != "":
			return "GET-range"
		}
		return "GET"
	case http.MethodHead:
		if bucketOnly {
			return "HEAD-bucket"
		}
		return "HEAD"
	case http.MethodPut:
		switch {
		case q.Has("partNumber"):
			return "PUT-part"
		case r.Header.Get("X-Amz-Copy-Source") != "":
			return "COPY"
		}
		return "PUT"
	case http.MethodPost:
		switch {
		case q.Has("uploads"):
			return "MPU-create"
		case q.Has("uploadId"):
			return "MPU-complete"
		case q.Has("delete"):
			return "DELETE-multi"
		}
		return "POST"
	case http.MethodDelete:
		if q.Has("uploadId") {
			return "MPU-abort"
		}
		return "DELETE"
	}
	return r.Method
}

func keys(q url.Values) []string {
	var ks []string
	for k := range q {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// take returns the counts so far and starts again from zero.
func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = map[string]int{}
	return out
}

var nextToken = regexp.MustCompile(`<NextContinuationToken>[^<]*</NextContinuationToken>`)

func (c *counter) isPaused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused
}

func (c *counter) pause(p bool) {
	c.mu.Lock()
	c.paused = p
	c.mu.Unlock()
}

func (c *counter) close() { c.srv.Close() }

// reqLog is the requests of each row and filesystem in the first round.
type reqLog map[string]map[string]map[string]int // row -> fs -> kind -> n

func (l reqLog) add(row, fs string, counts map[string]int) {
	if l[row] == nil {
		l[row] = map[string]map[string]int{}
	}
	if _, done := l[row][fs]; !done {
		l[row][fs] = counts
	}
}

func (l reqLog) print(w io.Writer, fss []string) {
	fmt.Fprintf(w, "\nS3 requests each filesystem sent per row (first round; the raw client's own requests are not proxied)\n\n")
	fmt.Fprintf(w, "| row | %s |\n|---|%s\n", strings.Join(fss, " | "), strings.Repeat("---|", len(fss)))
	for _, row := range rowOrder {
		if l[row] == nil {
			continue
		}
		cells := []string{row}
		for _, fs := range fss {
			counts, ok := l[row][fs]
			if !ok {
				cells = append(cells, "–")
				continue
			}
			var parts []string
			for _, k := range sortedKinds(counts) {
				parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
			}
			cells = append(cells, strings.Join(parts, ", "))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

func sortedKinds(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return m[ks[i]] > m[ks[j]] || m[ks[i]] == m[ks[j]] && ks[i] < ks[j] })
	return ks
}
