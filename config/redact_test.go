package config

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Credentials as API servers and proxies echo them are replaced; prose
// that names a credential is not.
func TestRedactEchoedShapes(t *testing.T) {
	const secret = "c2VjcmV0LXRva2VuLXZhbHVl"
	for _, msg := range []string{
		`{"bearerToken":"` + secret + `"}`,
		`access_token=` + secret,
		`api_key: ` + secret,
		`X-Auth-Token: ` + secret,
		`invalid token ` + secret,
		`password ` + secret + ` rejected`,
		`bad credential ` + secret,
	} {
		if got := Redact(msg); strings.Contains(got, secret) {
			t.Errorf("Redact(%q) = %q", msg, got)
		}
	}
	for _, prose := range []string{"the token expired", "password required", "no credentials found for this cluster"} {
		if got := Redact(prose); got != prose {
			t.Errorf("Redact(%q) = %q, want it unchanged", prose, got)
		}
	}
}

// RedactErrorFor takes out the config's own credentials whatever their
// shape, cuts a long message, and keeps what the error wraps.
func TestRedactErrorFor(t *testing.T) {
	cfg := &rest.Config{BearerToken: "tok-12345678", Password: "pw-87654321", ExecProvider: &clientcmdapi.ExecConfig{Env: []clientcmdapi.ExecEnvVar{{Name: "K", Value: "env-secret-1"}}}}
	cause := errors.New("cause")
	err := RedactErrorFor(errors.Join(cause, errors.New("got tok-12345678, pw-87654321 and env-secret-1; "+strings.Repeat("x", 2*MaxErrorMessage))), cfg)
	msg := err.Error()
	for _, s := range []string{"tok-12345678", "pw-87654321", "env-secret-1"} {
		if strings.Contains(msg, s) {
			t.Errorf("message keeps %q: %.200s", s, msg)
		}
	}
	if len(msg) > MaxErrorMessage+32 || !strings.Contains(msg, "bytes more)") {
		t.Errorf("message of %d bytes, not cut: %.80s…", len(msg), msg[len(msg)-60:])
	}
	if !errors.Is(err, cause) {
		t.Error("errors.Is no longer sees what the error wraps")
	}
	short := errors.New("fine")
	if RedactErrorFor(short, cfg) != short || RedactErrorFor(nil, cfg) != nil { //nolint:errorlint // the very value, not the same kind of error
		t.Error("an error with nothing to take out is not returned as it is")
	}
}
