package config

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mccr-dev/mccr/internal/fuzzcheck"
)

// fileTokenSecret is the content of the token file next to the fuzzed
// kubeconfig: read and used when a context names it, never printed.
const fileTokenSecret = "s3cr3t-FILE-token-xyz"

// FuzzLoadKubeconfig feeds arbitrary bytes to LoadFile, the loader of the
// file watcher, as a kubeconfig in a directory that also holds a CA, a
// client certificate and key, a token file, and a symlink to a secret
// outside it; with and without AllowAuthPlugins. Whatever the bytes:
//
//   - nothing panics;
//   - every config is usable (a host, TLS settings that load), named by a
//     name that config.ValidateName accepts, sourced from the file, with
//     no exec or auth-provider user unless allowed, no file left for
//     client-go to read and nothing from outside the directory;
//   - every error is a *FileError about the file wrapping one of the
//     package's sentinels, printable as one line, and quotes none of the
//     kubeconfig's credentials nor the token file's content;
//   - a context left out because of its name is reported as such.
//
// The corpus in testdata/fuzz/FuzzLoadKubeconfig holds kubeconfigs with
// recognisable credentials (fuzzcheck.Token, ...) in every place one goes,
// names that are not valid UTF-8, and file references in and out.
func FuzzLoadKubeconfig(f *testing.F) {
	dir, outside := f.TempDir(), f.TempDir()
	selfSigned(f, dir)
	writeFile(f, filepath.Join(dir, "token"), []byte(fileTokenSecret))
	writeFile(f, filepath.Join(outside, "secret"), []byte(outsideSecret))
	symlink(f, filepath.Join(outside, "secret"), filepath.Join(dir, "link-out"))
	path := filepath.Join(dir, "config")

	f.Add(kubeconfig(f, ctxSpec{"east", "https://127.0.0.1:6443", fuzzcheck.Token}), false)
	f.Add(kubeconfig(f, ctxSpec{"evil-\xff\xfe", "https://127.0.0.1:6443", fuzzcheck.Token}), false)
	f.Add(kubeconfig(f, ctxSpec{"evil-\u202e\n\x1b[31m", "https://127.0.0.1:6443", fuzzcheck.Token}), false)
	f.Add([]byte(relativePathsKubeconfig), false)
	f.Add(refKubeconfig("out", "https://127.0.0.1:6443", "", "tokenFile: link-out"), false)
	f.Add([]byte("contexts:\n- name: x\n  context: {cluster: c, user: u}\nclusters:\n- name: c\n  cluster: {server: \"https://admin:"+fuzzcheck.Password+"@h\"}\nusers:\n- name: u\n  user: {exec: {command: x, apiVersion: client.authentication.k8s.io/v1, env: [{name: K, value: "+fuzzcheck.EnvValue+"}]}}\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, allowPlugins bool) {
		writeFile(t, path, data)
		var opts []LoadOption
		if allowPlugins {
			opts = append(opts, AllowAuthPlugins())
		}
		cfgs, err := LoadFile(path, opts...)

		// What the bytes hold, as clientcmd reads them: the credentials no
		// message may quote, and what messages may.
		secrets := []string{fuzzcheck.Token, fuzzcheck.Password, fuzzcheck.KeyBody, fuzzcheck.EnvValue, fileTokenSecret, outsideSecret}
		public := []string{path}
		raw, parseErr := clientcmd.Load(data)
		if parseErr == nil {
			s, p := fuzzcheck.Kubeconfig(raw)
			secrets, public = append(secrets, s...), append(public, p...)
		}

		for i, c := range cfgs {
			if c == nil || c.Config == nil || c.Config.Host == "" {
				t.Fatalf("unusable config %d: %+v", i, c)
			}
			if err := ValidateName(c.Name); err != nil {
				t.Fatalf("config %d: %v", i, err)
			}
			if i > 0 && cfgs[i-1].Name >= c.Name {
				t.Fatalf("configs not sorted or not unique: %q", names(cfgs))
			}
			if c.Source != (Source{File: path, Context: c.Name}) {
				t.Fatalf("source = %+v", c.Source)
			}
			cfg := c.Config
			if !allowPlugins && (cfg.ExecProvider != nil || cfg.AuthProvider != nil) {
				t.Fatalf("%q: auth plugin accepted without AllowAuthPlugins", c.Name)
			}
			if cfg.BearerTokenFile != "" || cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" {
				t.Fatalf("%q: a file left for client-go to read: token %q, TLS %+v", c.Name, cfg.BearerTokenFile, cfg.TLSClientConfig)
			}
			for _, v := range []string{cfg.BearerToken, cfg.Password, string(cfg.CAData), string(cfg.CertData), string(cfg.KeyData)} {
				if strings.Contains(v, outsideSecret) {
					t.Fatalf("%q: carries a file from outside the directory", c.Name)
				}
			}
			if _, err := rest.TLSConfigFor(&rest.Config{Host: cfg.Host, TLSClientConfig: cfg.TLSClientConfig}); err != nil {
				t.Fatalf("%q: TLS settings accepted that do not load: %v", c.Name, err)
			}
			for _, msg := range []string{c.String(), c.Redacted()} {
				if s, ok := fuzzcheck.Leak(msg, secrets, public); ok {
					t.Fatalf("%q: description %q quotes the credential %q", c.Name, msg, s)
				}
			}
			if e := cfg.ExecProvider; e != nil && e.APIVersion != "client.authentication.k8s.io/v1" && e.APIVersion != "client.authentication.k8s.io/v1beta1" {
				t.Fatalf("%q: exec plugin client-go would refuse: apiVersion %q", c.Name, e.APIVersion)
			}
			_ = c.Fingerprint()
		}

		if err == nil {
			if parseErr == nil {
				for name := range raw.Contexts {
					if ValidateName(name) != nil {
						t.Fatalf("context %q, an invalid name, neither loaded nor reported", name)
					}
				}
			}
			return
		}
		reported, wholeFile := map[string]bool{}, false
		for _, fe := range fileErrors(t, err) {
			if fe.Path != path {
				t.Fatalf("error about %q, want %q", fe.Path, path)
			}
			msg := fe.Error()
			if i := slices.IndexFunc([]error{ErrInvalidKubeconfig, ErrNoContexts, ErrAuthPluginRefused, ErrFileReferenceRefused}, func(s error) bool { return errors.Is(fe, s) }); i < 0 {
				t.Fatalf("error wraps none of the sentinels: %v", msg)
			}
			if allowPlugins && errors.Is(fe, ErrAuthPluginRefused) {
				t.Fatalf("auth plugin refused with AllowAuthPlugins: %v", msg)
			}
			if err := fuzzcheck.OneLine(msg); err != nil {
				t.Fatal(err)
			}
			if s, ok := fuzzcheck.Leak(msg, secrets, public); ok {
				t.Fatalf("error quotes the credential %q: %v", s, msg)
			}
			switch {
			case errors.Is(fe, ErrInvalidName):
				reported[fe.Context] = true
			case fe.Context == "":
				wholeFile = true
			}
		}
		if parseErr == nil && !wholeFile {
			for name := range raw.Contexts {
				if ValidateName(name) != nil && !reported[name] {
					t.Fatalf("context %q, an invalid name, not reported as such: %v", name, err)
				}
			}
		}
	})
}
