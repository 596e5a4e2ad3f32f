package config

import (
	"math"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// TestSetsRateLimit: only a config that says something about its rate
// limit sets one; a loaded kubeconfig does not.
func TestSetsRateLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	writeFile(t, path, kubeconfig(t, ctxSpec{"a", "https://127.0.0.1:6443", "tok"}))
	if loaded := loadOne(t, path).Config; SetsRateLimit(loaded) {
		t.Errorf("a loaded kubeconfig (QPS %v, burst %d) counts as setting a rate limit", loaded.QPS, loaded.Burst)
	}
	for _, c := range []struct {
		name string
		cfg  *rest.Config
		want bool
	}{
		{"nil", nil, false},
		{"empty", &rest.Config{}, false},
		{"burst only", &rest.Config{Burst: 50}, false},
		{"QPS", &rest.Config{QPS: 20}, true},
		{"QPS and burst", &rest.Config{QPS: 20, Burst: 40}, true},
		{"no limit (ctrl.GetConfig)", &rest.Config{QPS: -1}, true},
		{"NaN", &rest.Config{QPS: float32(math.NaN())}, true},
		{"RateLimiter", &rest.Config{RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter()}, true},
	} {
		if got := SetsRateLimit(c.cfg); got != c.want {
			t.Errorf("%s: SetsRateLimit = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestFingerprintCoversRateLimit: a changed QPS, Burst or RateLimiter is a
// changed config (an Update that restarts the member), the same one is not.
func TestFingerprintCoversRateLimit(t *testing.T) {
	base := func() *NamedConfig {
		return NewNamedConfig("a", &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "tok"})
	}
	want := base().Fingerprint()
	if got := base().Fingerprint(); got != want {
		t.Fatal("the same config twice differs")
	}
	for name, change := range map[string]func(*rest.Config){
		"QPS":         func(c *rest.Config) { c.QPS = 50 },
		"no limit":    func(c *rest.Config) { c.QPS = -1 },
		"burst":       func(c *rest.Config) { c.Burst = 100 },
		"RateLimiter": func(c *rest.Config) { c.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter() },
	} {
		nc := base()
		change(nc.Config)
		if nc.Fingerprint() == want || nc.ReachFingerprint() == base().ReachFingerprint() {
			t.Errorf("changing the %s left the fingerprint alone", name)
		}
	}
}
