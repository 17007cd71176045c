// Package promtest starts fake Prometheus servers that fail the ways a
// fleet report must name in one line: one that is down, one that answers
// something other than the query API, one that never answers, and one
// with no series. promsource's tests and the report command's use them.
package promtest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Failing holds the base URLs of servers that fail in each way; those
// that run are closed when the test ends.
type Failing struct {
	// Down: nothing listens there (a port bound, then released).
	Down string
	// Garbage answers a web server's default page.
	Garbage string
	// Slow reads the query and answers nothing until the client leaves.
	Slow string
	// Empty answers every query with an empty vector: no series.
	Empty string
}

// EmptyAnswer is a query API answer with no series.
const EmptyAnswer = `{"status":"success","data":{"resultType":"vector","result":[]}}`

// Start starts the servers of Failing for t.
func Start(t testing.TB) Failing {
	t.Helper()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := Failing{Down: "http://" + closed.Addr().String()}
	closed.Close()
	serve := func(h http.HandlerFunc) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	f.Garbage = serve(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html>\n<body>It works!</body>\n</html>\n"))
	})
	f.Slow = serve(func(w http.ResponseWriter, r *http.Request) {
		// The server notices the client leave only once the body is read.
		r.ParseForm()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	f.Empty = serve(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(EmptyAnswer))
	})
	return f
}
