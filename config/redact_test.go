package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
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
		`invalid token "` + secret + `"`,
	} {
		if got := Redact(msg); strings.Contains(got, secret) {
			t.Errorf("Redact(%q) = %q", msg, got)
		}
	}
	for _, prose := range []string{
		"the token expired", "password required", "no credentials found for this cluster",
		// Kubernetes' own messages about Secrets and service accounts.
		"the server could not find the requested resource (get secrets my-secret-name-with-long-suffix)",
		"failed to get secret kube-system/my-secret-name-with-long-suffix",
		`spec.automountServiceAccountToken: Invalid value: "true"`,
	} {
		if got := Redact(prose); got != prose {
			t.Errorf("Redact(%q) = %q, want it unchanged", prose, got)
		}
	}
}

// RedactErrorFor takes out the config's own credentials whatever their
// shape (the longest first, short ones too), cuts a long message once,
// keeps errors.Is, and gives errors.As an API status with the new message
// alone.
func TestRedactErrorFor(t *testing.T) {
	cfg := &rest.Config{BearerToken: "ABCDEFGH", Password: "ABCDEFGH12345678", ExecProvider: &clientcmdapi.ExecConfig{Env: []clientcmdapi.ExecEnvVar{
		{Name: "SECRET", Value: "env-secret-value-0123456789"}, {Name: "REGION", Value: "eu-west-1"},
	}}}
	cause := errors.New("cause")
	long := "got ABCDEFGH12345678, ABCDEFGH, pw hunter2 and env-secret-value-0123456789 in eu-west-1; " + strings.Repeat("x", 1<<20)
	err := RedactErrorFor(errors.Join(cause, errors.New(long)), cfg)
	msg := err.Error()
	for _, s := range []string{"ABCDEFGH", "12345678", "env-secret-value"} {
		if strings.Contains(msg, s) {
			t.Errorf("message keeps %q: %.200s", s, msg)
		}
	}
	if !strings.Contains(msg, "eu-west-1") {
		t.Errorf("a short setting of the exec plugin was taken out: %.200s", msg)
	}
	if len(msg) > MaxErrorMessage+64 || !strings.Contains(msg, "bytes more)") {
		t.Errorf("message of %d bytes, not cut", len(msg))
	}
	if !errors.Is(err, cause) {
		t.Error("errors.Is no longer sees what the error wraps")
	}
	if again := RedactErrorFor(err, cfg); again != err { //nolint:errorlint // the very value
		t.Errorf("redacted again: %.100s…", again.Error()[len(again.Error())-60:])
	}
	// A credential it did not know of is still taken out of its result.
	if again := RedactErrorWith(err, "eu-west-1"); strings.Contains(again.Error(), "eu-west-1") || !errors.Is(again, cause) {
		t.Errorf("its result given another credential: %.100s", again.Error())
	}
	if short := RedactErrorWith(errors.New("pw hunter2"), "hunter2"); short.Error() != "pw REDACTED" {
		t.Errorf("a short credential: %q", short.Error())
	}
	if RedactErrorWith(nil) != nil {
		t.Error("nil is not nil")
	}

	// An API server's answer: its status is found, without the
	// credential its message and causes held.
	status := apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "x", field.ErrorList{field.Invalid(field.NewPath("data"), "ABCDEFGH12345678", "echoed")})
	err = RedactErrorFor(fmt.Errorf("listing: %w", errors.Join(status, &FileError{Path: "/x", Err: errors.New("ABCDEFGH12345678")})), cfg)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("apierrors.IsInvalid(%v) = false", err)
	}
	var se *apierrors.StatusError
	if !errors.As(err, &se) || strings.Contains(fmt.Sprint(se.ErrStatus), "ABCDEFGH") {
		t.Errorf("errors.As gives %+v", se)
	}
	if other, ok := errors.AsType[*FileError](err); ok {
		t.Errorf("errors.As reaches into the original error: %v", other)
	}
}

// A quoted credential is replaced whole, spaces and escaped quotes and
// all, however it is quoted: in JSON, in YAML, in single quotes, and in a
// JSON document an error quotes again with %q.
func TestRedactQuotedValuesWhole(t *testing.T) {
	const value = `pass phrase with "inner" quote-s3cr3t`
	quoted := strconv.Quote(value) // as JSON writes it
	inner, err := json.Marshal(map[string]string{"password": value})
	if err != nil {
		t.Fatal(err)
	}
	nested, err := json.Marshal(map[string]string{"config": string(inner)}) // an Argo CD Secret's config, as JSON
	if err != nil {
		t.Fatal(err)
	}
	docs := []string{
		`{"password": ` + quoted + `}`,
		`{"bearerToken":` + quoted + `,"tlsClientConfig":{}}`,
		`password: ` + quoted,
		`client_secret = ` + quoted,
		string(inner),
		string(nested),
	}
	for _, doc := range docs {
		once := fmt.Sprintf("decoding %q: bad", doc)
		for _, msg := range []string{doc, once, fmt.Sprintf("loading: %q", once)} {
			got := Redact(msg)
			for _, part := range []string{"phrase", "inner", "s3cr3t"} {
				if strings.Contains(got, part) {
					t.Errorf("Redact(%s) = %s: %q left", msg, got, part)
				}
			}
		}
	}
	for _, msg := range []string{`password='two words s3cr3t'`, `token: 'two words s3cr3t'`} {
		if got := Redact(msg); strings.Contains(got, "words") || strings.Contains(got, "s3cr3t") {
			t.Errorf("Redact(%s) = %s", msg, got)
		}
	}
	// Backslashes belong to an unquoted value (a domain account, a Windows
	// path), and a YAML single-quoted value doubles its apostrophes.
	for _, msg := range []string{`password=ab\cd-s3cr3t`, `token=CORP\svc-s3cr3t rejected`, `password: 'it''s-s3cr3t'`, `api_key=\\s3cr3t`} {
		if got := Redact(msg); strings.Contains(got, "s3cr3t") {
			t.Errorf("Redact(%s) = %s", msg, got)
		}
	}
	// A value that ends in an escaped backslash ends at its quote.
	for msg, want := range map[string]string{
		`{"password":"a\\","user":"admin"}`:                           `{"password":"REDACTED","user":"admin"}`,
		fmt.Sprintf("%q", `{"password":"a\\","user":"admin"}`):        `"{\"password\":\"REDACTED\",\"user\":\"admin\"}"`,
		fmt.Sprintf("%q", `{"password":"say \"hi\"","user":"admin"}`): `"{\"password\":\"REDACTED\",\"user\":\"admin\"}"`,
	} {
		if got := Redact(msg); got != want {
			t.Errorf("Redact(%s) = %s, want %s", msg, got, want)
		}
	}
	// What follows the value stays, quotes closed as they were.
	if got, want := Redact(`{"password": "a b", "user": "admin"}`), `{"password": "REDACTED", "user": "admin"}`; got != want {
		t.Errorf("Redact = %s, want %s", got, want)
	}
	if got, want := Redact(fmt.Sprintf("%q", `{"token":"a b","user":"admin"}`)), `"{\"token\":\"REDACTED\",\"user\":\"admin\"}"`; got != want {
		t.Errorf("Redact = %s, want %s", got, want)
	}
}
