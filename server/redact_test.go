package server_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/test"
)

// TestSecretsStayOutOfStatusAndLogs: a password in a member's server URL
// and its token appear in no Status and no log line, for a member that
// cannot be reached and one whose credentials are rejected.
func TestSecretsStayOutOfStatusAndLogs(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 10})
	srv, _ := fakeServer(t, func(o *ctrl.Options) { o.Logger = log })

	closed, err := test.Unreachable("x")
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(closed.Config.Host, "https://")
	unreachable := &rest.Config{Host: "https://admin:hunter2-password@" + host, BearerToken: "tok-unreachable-secret", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	f := fakeMember(t)
	rejected := f.Config()
	rejected.BearerToken = "tok-rejected-secret"
	rejected.Host = strings.Replace(rejected.Host, "https://", "https://admin:hunter2-password@", 1)
	for name, cfg := range map[string]*rest.Config{"unreachable": unreachable, "rejected": rejected} {
		if err := srv.Add(config.NewNamedConfig(name, cfg)); err != nil {
			t.Fatal(err)
		}
		test.Eventually(t, 30*time.Second, name+" failed with an error", func() bool {
			st, err := srv.Status(name)
			return err == nil && st.Failures > 0 && st.LastError != nil
		})
		st, _ := srv.Status(name)
		t.Logf("%s: %v", name, st.LastError)
		for _, secret := range []string{"hunter2-password", "tok-"} {
			if strings.Contains(st.LastError.Error(), secret) {
				t.Errorf("%s: Status().LastError holds a secret: %v", name, st.LastError)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) == 0 {
		t.Fatal("nothing was logged: the check below would prove nothing")
	}
	for _, l := range lines {
		if strings.Contains(l, "hunter2-password") || strings.Contains(l, "tok-unreachable-secret") || strings.Contains(l, "tok-rejected-secret") {
			t.Errorf("a log line holds a secret: %s", l)
		}
	}
}
