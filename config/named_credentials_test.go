package config

import (
	"testing"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ConnectionFingerprint leaves out the credentials a running member takes
// in place (token, token file, basic auth), and only those: a change to
// them alone changes ReachFingerprint and Fingerprint but not it; any other
// change, or a change of credentials next to an exec plugin or auth
// provider (which supply their own), changes it too.
func TestConnectionFingerprintLeavesOutHeldCredentials(t *testing.T) {
	base := func() *rest.Config {
		return &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "one", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}}
	}
	execPlugin := &clientcmdapi.ExecConfig{Command: "plugin", APIVersion: "client.authentication.k8s.io/v1"}
	was := NewNamedConfig("a", base())
	for _, tc := range []struct {
		name       string
		change     func(*rest.Config)
		sameConn   bool
		alsoChange func(*rest.Config) // applied to the old config too
	}{
		{name: "token", change: func(c *rest.Config) { c.BearerToken = "two" }, sameConn: true},
		{name: "token file", change: func(c *rest.Config) { c.BearerToken, c.BearerTokenFile = "", "/var/run/token" }, sameConn: true},
		{name: "basic auth", change: func(c *rest.Config) { c.BearerToken, c.Username, c.Password = "", "u", "p" }, sameConn: true},
		{name: "no credentials", change: func(c *rest.Config) { c.BearerToken = "" }, sameConn: true},
		{name: "token and server", change: func(c *rest.Config) { c.BearerToken, c.Host = "two", "https://127.0.0.1:6444" }},
		{name: "token and CA", change: func(c *rest.Config) { c.BearerToken, c.CAData = "two", []byte("other") }},
		{name: "client certificate", change: func(c *rest.Config) { c.CertData, c.KeyData = []byte("cert"), []byte("key") }},
		{name: "impersonation", change: func(c *rest.Config) { c.Impersonate.UserName = "someone" }},
		{name: "exec plugin added", change: func(c *rest.Config) { c.BearerToken, c.ExecProvider = "", execPlugin }},
		{name: "token next to an exec plugin", change: func(c *rest.Config) { c.BearerToken = "two" },
			alsoChange: func(c *rest.Config) { c.ExecProvider = execPlugin }},
		{name: "token next to an auth provider", change: func(c *rest.Config) { c.BearerToken = "two" },
			alsoChange: func(c *rest.Config) { c.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := was
			oldCfg, newCfg := base(), base()
			if tc.alsoChange != nil {
				tc.alsoChange(oldCfg)
				tc.alsoChange(newCfg)
				old = NewNamedConfig("a", oldCfg)
			}
			tc.change(newCfg)
			now := NewNamedConfig("a", newCfg)
			if now.ReachFingerprint() == old.ReachFingerprint() || now.Fingerprint() == old.Fingerprint() {
				t.Fatal("the change left ReachFingerprint or Fingerprint alone")
			}
			if same := now.ConnectionFingerprint() == old.ConnectionFingerprint(); same != tc.sameConn {
				t.Errorf("ConnectionFingerprint unchanged: %v, want %v", same, tc.sameConn)
			}
		})
	}
	// Properties count in neither; the name in both.
	props := NewNamedConfig("a", base())
	props.Properties = map[string]string{"k": "v"}
	if props.ConnectionFingerprint() != was.ConnectionFingerprint() {
		t.Error("Properties changed ConnectionFingerprint")
	}
	if NewNamedConfig("b", base()).ConnectionFingerprint() == was.ConnectionFingerprint() {
		t.Error("another name, the same ConnectionFingerprint")
	}
	// The digest does not hold the token, and leaves the config as it was.
	cfg := base()
	nc := NewNamedConfig("a", cfg)
	_ = nc.ConnectionFingerprint()
	if cfg.BearerToken != "one" {
		t.Error("ConnectionFingerprint changed the config")
	}
}
