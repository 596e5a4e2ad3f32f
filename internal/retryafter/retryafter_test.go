package retryafter_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/internal/retryafter"
)

// TestWritesAreNotSentAgainAfterAServerError: a gateway that answers a
// write it forwarded with a 5xx and Retry-After gets the write once, and
// the caller the error; a read, and a write refused with 429, are sent
// again as client-go does.
func TestWritesAreNotSentAgainAfterAServerError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		write  bool
		wantN  int64
	}{
		{"create answered 503", http.StatusServiceUnavailable, true, 1},
		{"create answered 504", http.StatusGatewayTimeout, true, 1},
		{"create answered 500", http.StatusInternalServerError, true, 1},
		{"create answered 429", http.StatusTooManyRequests, true, 2},
		{"get answered 503", http.StatusServiceUnavailable, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					w.Header().Set("Retry-After", "1")
					http.Error(w, "upstream connect error or disconnect/reset before headers", tc.status)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"ns"}}`))
			}))
			t.Cleanup(srv.Close)
			cfg := &rest.Config{Host: srv.URL}
			cfg.Wrap(retryafter.Wrap)
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cms := cs.CoreV1().ConfigMaps("ns")
			if tc.write {
				_, err = cms.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "x-"}}, metav1.CreateOptions{})
			} else {
				_, err = cms.Get(context.Background(), "x", metav1.GetOptions{})
			}
			if got := n.Load(); got != tc.wantN {
				t.Errorf("sent %d times, want %d (error %v)", got, tc.wantN, err)
			}
			if wantErr := tc.wantN == 1; (err != nil) != wantErr {
				t.Errorf("error %v, want one: %v", err, wantErr)
			}
		})
	}
}
