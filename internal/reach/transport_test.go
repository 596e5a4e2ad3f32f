package reach

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestRejectionReadBeforeStop: the member stops when a request is
// rejected, which ends its requests; the caller whose request was rejected
// still reads the API server's answer in full.
func TestRejectionReadBeforeStop(t *testing.T) {
	const status = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		// The body follows the headers a moment later, as it may over a
		// real network: the client has the response before its body.
		w.(http.Flusher).Flush()
		time.Sleep(50 * time.Millisecond)
		_, _ = io.WriteString(w, status)
	}))
	srv.EnableHTTP2 = true // as API servers: a stream's body ends with its request's context
	srv.StartTLS()
	defer srv.Close()
	ctx, stop := context.WithCancel(context.Background()) // the member's lifetime
	defer stop()
	rejected := 0
	rt := &transport{
		next:       srv.Client().Transport,
		onError:    func(err error) { t.Errorf("connection error: %v", err) },
		onRefused:  func(*http.Request, int) { rejected++; stop() },
		onRejected: func(*http.Request, int) { t.Error("a 401 told as a 403 on discovery") },
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/api/v1/namespaces/a/configmaps", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != status || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("rejected request read %d %q, %v; want 401 and the Status", resp.StatusCode, body, err)
	}
	if rejected != 1 {
		t.Errorf("onRejected called %d times, want 1", rejected)
	}
}
