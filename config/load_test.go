package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mccr-dev/mccr/internal/testcert"
)

// ctxSpec is one context of a test kubeconfig: a token user and a local
// https server that nothing ever connects to.
type ctxSpec struct {
	Name, Server, Token string
}

// kubeconfig renders contexts as a kubeconfig, one cluster and user each.
func kubeconfig(t testing.TB, specs ...ctxSpec) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	for _, s := range specs {
		cfg.Clusters[s.Name] = &clientcmdapi.Cluster{Server: s.Server, InsecureSkipTLSVerify: true}
		cfg.AuthInfos[s.Name] = &clientcmdapi.AuthInfo{Token: s.Token}
		cfg.Contexts[s.Name] = &clientcmdapi.Context{Cluster: s.Name, AuthInfo: s.Name}
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func symlink(t testing.TB, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func names(cfgs []*NamedConfig) []string {
	out := make([]string, 0, len(cfgs))
	for _, c := range cfgs {
		out = append(out, c.Name)
	}
	return out
}

// fileErrors flattens a joined error into its *FileError parts.
func fileErrors(t testing.TB, err error) []*FileError {
	t.Helper()
	var out []*FileError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var fe *FileError
		if !errors.As(err, &fe) {
			t.Fatalf("error %v is not a *FileError", err)
		}
		out = append(out, fe)
	}
	walk(err)
	return out
}

func TestLoadFileOneConfigPerContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	writeFile(t, path, kubeconfig(t,
		ctxSpec{"zeta", "https://127.0.0.1:6443", "tok-z"},
		ctxSpec{"alpha", "https://127.0.0.1:6444", "tok-a"},
		ctxSpec{"mid", "https://127.0.0.1:6445", "tok-m"},
	))

	cfgs, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(cfgs), []string{"alpha", "mid", "zeta"}; !slices.Equal(got, want) {
		t.Fatalf("names = %v, want %v", got, want)
	}
	a := cfgs[0]
	if a.Config.Host != "https://127.0.0.1:6444" || a.Config.BearerToken != "tok-a" {
		t.Errorf("alpha: host %q token set %v", a.Config.Host, a.Config.BearerToken == "tok-a")
	}
	if a.Source != (Source{File: path, Context: "alpha"}) {
		t.Errorf("alpha source = %+v", a.Source)
	}
	if strings.Contains(a.String(), "tok-a") {
		t.Errorf("String() leaks the token: %s", a)
	}

	all, err := LoadConfigsFromConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(all), names(cfgs)) {
		t.Errorf("LoadConfigsFromConfigFile = %v", names(all))
	}
}

func TestLoadFileErrors(t *testing.T) {
	const good = `
- name: good
  context: {cluster: c, user: u}`
	const head = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
- name: noserver
  cluster: {insecure-skip-tls-verify: true}
- name: withca
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: no-such-ca.crt}
- name: badca
  cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: bm90IGEgY2VydA==}
users:
- name: u
  user: {token: secret-token-value-123456}
contexts:`
	cases := []struct {
		name     string
		content  string
		sentinel error
		context  string // "" when the whole file is rejected
		goodLeft bool   // the "good" context still loads
		mention  string // in the message
	}{
		{name: "malformed yaml", content: "clusters: [\n  - name: x\n    cluster: {server: : }", sentinel: ErrInvalidKubeconfig},
		{name: "not a kubeconfig", content: "kind: Pod\napiVersion: v1\n", sentinel: ErrInvalidKubeconfig},
		{name: "wrong field type", content: "contexts: 5\n", sentinel: ErrInvalidKubeconfig},
		{name: "empty file", content: "", sentinel: ErrNoContexts},
		{name: "no contexts", content: "apiVersion: v1\nkind: Config\nclusters: []\n", sentinel: ErrNoContexts},
		{name: "missing cluster", content: head + good + `
- name: broken
  context: {cluster: nope, user: u}`, sentinel: ErrInvalidKubeconfig, context: "broken", goodLeft: true, mention: `cluster "nope" not found`},
		{name: "missing user", content: head + good + `
- name: broken
  context: {cluster: c, user: nobody}`, sentinel: ErrInvalidKubeconfig, context: "broken", goodLeft: true, mention: `user "nobody" not found`},
		{name: "cluster without server", content: head + good + `
- name: broken
  context: {cluster: noserver, user: u}`, sentinel: ErrInvalidKubeconfig, context: "broken", goodLeft: true, mention: "no server"},
		{name: "context without cluster", content: head + good + `
- name: broken
  context: {user: u}`, sentinel: ErrInvalidKubeconfig, context: "broken", goodLeft: true, mention: "no cluster"},
		{name: "missing CA file", content: head + good + `
- name: broken
  context: {cluster: withca, user: u}`, sentinel: ErrInvalidKubeconfig, context: "broken", goodLeft: true, mention: "no-such-ca.crt"},
		{name: "CA data is not a certificate", content: head + good + `
- name: broken
  context: {cluster: badca, user: u}`, sentinel: ErrInvalidKubeconfig, context: "broken", goodLeft: true, mention: "TLS"},
		{name: "context twice in one file", content: head + good + `
- name: broken
  context: {cluster: c, user: u}
- name: broken
  context: {cluster: c, user: u}`, sentinel: ErrInvalidKubeconfig, mention: `duplicate name "broken"`},
		{name: "user twice in one file", content: head + good + `
users:
- name: u
  user: {token: secret-token-value-123456}
- name: u
  user: {token: secret-token-value-789}`, sentinel: ErrInvalidKubeconfig, mention: `duplicate name "u"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kc.yaml")
			writeFile(t, path, []byte(tc.content))
			cfgs, err := LoadFile(path)
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("err = %v, want %v", err, tc.sentinel)
			}
			fes := fileErrors(t, err)
			if len(fes) != 1 {
				t.Fatalf("want one FileError, got %v", fes)
			}
			if fes[0].Path != path || fes[0].Context != tc.context {
				t.Errorf("error is about %q/%q, want %q/%q", fes[0].Path, fes[0].Context, path, tc.context)
			}
			msg := err.Error()
			if !strings.Contains(msg, path) || (tc.context != "" && !strings.Contains(msg, `"`+tc.context+`"`)) {
				t.Errorf("message %q does not name file and context", msg)
			}
			if tc.mention != "" && !strings.Contains(msg, tc.mention) {
				t.Errorf("message %q does not mention %q", msg, tc.mention)
			}
			if strings.Contains(msg, "secret-token-value") {
				t.Errorf("message leaks a token: %q", msg)
			}
			if tc.goodLeft {
				if got := names(cfgs); !slices.Equal(got, []string{"good"}) {
					t.Errorf("configs = %v, want [good]", got)
				}
			} else if len(cfgs) != 0 {
				t.Errorf("configs = %v, want none", names(cfgs))
			}
		})
	}
}

// A kubeconfig's names and paths are quoted in its errors cut short: a
// context naming a cluster, user, file or proxy of a megabyte gets an
// error of its usual size, still naming the file and the context, and the
// other contexts load.
func TestLoadFileErrorsQuoteNamesCut(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	const head = `clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
- name: ` + "nos-%[1]s" + `
  cluster: {insecure-skip-tls-verify: true}
- name: proxied
  cluster: {server: "https://127.0.0.1:6443", proxy-url: "::%[1]s"}
users:
- name: ` + "exec-%[1]s" + `
  user: {exec: {command: x, apiVersion: client.authentication.k8s.io/v1}}
- name: tokenfile
  user: {tokenFile: "%[1]s"}
contexts:
- name: good
  context: {cluster: c}
- name: missing-cluster
  context: {cluster: "nope-%[1]s"}
- name: no-server
  context: {cluster: "nos-%[1]s"}
- name: missing-user
  context: {cluster: c, user: "nobody-%[1]s"}
- name: exec-user
  context: {cluster: c, user: "exec-%[1]s"}
- name: token-file
  context: {cluster: c, user: tokenfile}
- name: proxy
  context: {cluster: proxied}
`
	path := filepath.Join(t.TempDir(), "config")
	writeFile(t, path, fmt.Appendf(nil, head, big))
	cfgs, err := LoadFile(path)
	if got := names(cfgs); !slices.Equal(got, []string{"good"}) {
		t.Fatalf("configs = %v, want [good]", got)
	}
	fes := fileErrors(t, err)
	if len(fes) != 6 {
		t.Fatalf("want six errors, one a context, got %d: %.2000v", len(fes), err)
	}
	for _, fe := range fes {
		msg := fe.Error()
		if len(msg) > 2*MaxErrorMessage {
			t.Errorf("context %q: an error of %d bytes: %.300s…", fe.Context, len(msg), msg)
		}
		if !strings.Contains(msg, path) || !strings.Contains(msg, `"`+fe.Context+`"`) {
			t.Errorf("message %.300q does not name file and context", msg)
		}
	}
}

func TestLoadFileRefusesAuthPlugins(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kc.yaml")
	writeFile(t, path, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: plain
  user: {token: tok}
- name: runs-exec
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/echo, args: [hello], interactiveMode: Never}
- name: runs-provider
  user:
    auth-provider: {name: oidc, config: {client-id: x}}
contexts:
- name: exec
  context: {cluster: c, user: runs-exec}
- name: provider
  context: {cluster: c, user: runs-provider}
- name: plain
  context: {cluster: c, user: plain}
`))

	cfgs, err := LoadFile(path)
	if !errors.Is(err, ErrAuthPluginRefused) {
		t.Fatalf("err = %v, want ErrAuthPluginRefused", err)
	}
	errs := fileErrors(t, err)
	refused := make([]string, 0, len(errs))
	for _, fe := range errs {
		if fe.Path != path {
			t.Errorf("error names %q, want %q", fe.Path, path)
		}
		refused = append(refused, fe.Context)
	}
	if !slices.Equal(refused, []string{"exec", "provider"}) {
		t.Errorf("refused contexts = %v", refused)
	}
	if got := names(cfgs); !slices.Equal(got, []string{"plain"}) {
		t.Errorf("configs = %v, want [plain]", got)
	}

	cfgs, err = LoadFile(path, AllowAuthPlugins())
	if err != nil {
		t.Fatal(err)
	}
	if got := names(cfgs); !slices.Equal(got, []string{"exec", "plain", "provider"}) {
		t.Fatalf("configs = %v", got)
	}
	if cfgs[0].Config.ExecProvider == nil || cfgs[0].Config.ExecProvider.Command != "/bin/echo" {
		t.Errorf("exec provider = %+v", cfgs[0].Config.ExecProvider)
	}
	if cfgs[2].Config.AuthProvider == nil || cfgs[2].Config.AuthProvider.Name != "oidc" {
		t.Errorf("auth provider = %+v", cfgs[2].Config.AuthProvider)
	}
}

// TestLoadFileReferencedFilesMustBeRegular guards against kubeconfigs that
// would make loading read forever or block, whether the files are checked
// and read by the loader (the default) or left to client-go
// (AllowFileReferences).
func TestLoadFileReferencedFilesMustBeRegular(t *testing.T) {
	for mode, opts := range map[string][]LoadOption{"default": nil, "allowed": {AllowFileReferences()}} {
		for name, user := range map[string]string{
			"token file is a directory": `{tokenFile: sub}`,
			"token file is huge":        `{tokenFile: big-token}`,
			"client key is a directory": `{client-certificate: sub, client-key: sub}`,
		} {
			t.Run(mode+"/"+name, func(t *testing.T) {
				dir := t.TempDir()
				writeFile(t, filepath.Join(dir, "big-token"), make([]byte, maxTokenFileSize+1))
				writeFile(t, filepath.Join(dir, "sub", "x"), nil)
				path := filepath.Join(dir, "kc")
				writeFile(t, path, []byte(`
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: `+user+`
contexts:
- name: x
  context: {cluster: c, user: u}
`))
				_, err := LoadFile(path, opts...)
				if !errors.Is(err, ErrInvalidKubeconfig) {
					t.Fatalf("err = %v, want ErrInvalidKubeconfig", err)
				}
			})
		}
	}
}

func TestLoadFileErrorsDoNotQuoteTheFile(t *testing.T) {
	const secret = "sha256~VerySecretTokenValue0123456789"
	data := []byte("users:\n- name: u\n  user: {token: " + secret + "}\n")
	msg := decodeMessage(errors.New(`cannot decode near "`+secret+`"`), data)
	if strings.Contains(msg, secret) {
		t.Errorf("decodeMessage kept the secret: %q", msg)
	}
	if got := decodeMessage(errors.New("yaml: line 3: mapping values are not allowed"), data); got != "yaml: line 3: mapping values are not allowed" {
		t.Errorf("decodeMessage changed a harmless message: %q", got)
	}
	user := &clientcmdapi.AuthInfo{Token: secret}
	if msg := WithoutSecrets(errors.New("bad token "+secret), &clientcmdapi.Cluster{}, user); strings.Contains(msg, secret) {
		t.Errorf("withoutSecrets kept the secret: %q", msg)
	}

	// Real decode failures of files holding credentials.
	for _, content := range []string{
		"users:\n- name: u\n  user:\n    token: " + secret + "\n    bogus: : x\n",
		"users:\n- name: u\n  user:\n    client-key-data: " + secret + "!!\n",
		"users: " + secret + "\n",
		"users:\n- name: u\n  user: {token: " + secret + "}\n- name: u\n  user: {token: " + secret + "}\n",
		secret,
		// A value that starts with a YAML indicator: the decoder quotes
		// the alias it takes it for, whatever its length.
		"users:\n- name: u\n  user: {token: *" + secret + "}\n",
		"users:\n- name: u\n  user: {token: *VerySecretTokenValue}\n",
		"users:\n- name: u\n  user: {token: *VerySecretTokenValue0123456789, password: *VerySecretTokenValue}\n",
	} {
		path := filepath.Join(t.TempDir(), "kc")
		writeFile(t, path, []byte(content))
		_, err := LoadFile(path)
		if err == nil {
			t.Fatalf("%q: no error", content)
		}
		if strings.Contains(err.Error(), "VerySecretTokenValue") {
			t.Errorf("error quotes the secret: %v", err)
		}
	}
}

// selfSigned writes a CA certificate and a client certificate/key pair
// (the same self-signed cert) as PEM files into dir.
func selfSigned(t testing.TB, dir string) {
	t.Helper()
	certPEM, keyPEM := testcert.SelfSigned(t)
	writeFile(t, filepath.Join(dir, "ca.crt"), certPEM)
	writeFile(t, filepath.Join(dir, "client.crt"), certPEM)
	writeFile(t, filepath.Join(dir, "client.key"), keyPEM)
	writeFile(t, filepath.Join(dir, "token"), []byte("file-token"))
}

const relativePathsKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: ca.crt}
users:
- name: cert
  user: {client-certificate: client.crt, client-key: client.key}
- name: tokenfile
  user: {tokenFile: ./token}
contexts:
- name: by-cert
  context: {cluster: c, user: cert}
- name: by-token-file
  context: {cluster: c, user: tokenfile}
`

func TestLoadFileResolvesRelativePaths(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "kube")
	selfSigned(t, dir)
	writeFile(t, filepath.Join(dir, "config"), []byte(relativePathsKubeconfig))

	// Load through a relative path from a working directory holding none of
	// the files: paths must follow the kubeconfig, not the process.
	t.Chdir(root)
	cfgs, err := LoadFile(filepath.Join("kube", "config"), AllowFileReferences())
	if err != nil {
		t.Fatal(err)
	}
	if got := names(cfgs); !slices.Equal(got, []string{"by-cert", "by-token-file"}) {
		t.Fatalf("configs = %v", got)
	}
	byCert, byToken := cfgs[0].Config, cfgs[1].Config
	if want := filepath.Join(dir, "ca.crt"); byCert.CAFile != want {
		t.Errorf("CAFile = %q, want %q", byCert.CAFile, want)
	}
	if want := filepath.Join(dir, "client.crt"); byCert.CertFile != want {
		t.Errorf("CertFile = %q, want %q", byCert.CertFile, want)
	}
	if want := filepath.Join(dir, "client.key"); byCert.KeyFile != want {
		t.Errorf("KeyFile = %q, want %q", byCert.KeyFile, want)
	}
	if want := filepath.Join(dir, "token"); byToken.BearerTokenFile != want || byToken.BearerToken != "file-token" {
		t.Errorf("BearerTokenFile = %q (token read: %v), want %q", byToken.BearerTokenFile, byToken.BearerToken == "file-token", want)
	}

	tlsCfg, err := rest.TLSConfigFor(byCert)
	if err != nil {
		t.Fatalf("TLSConfigFor: %v", err)
	}
	if tlsCfg.RootCAs == nil || tlsCfg.GetClientCertificate == nil {
		t.Fatalf("TLS config lacks CA or client certificate: %+v", tlsCfg)
	}
	cert, err := tlsCfg.GetClientCertificate(nil)
	if err != nil || len(cert.Certificate) == 0 {
		t.Fatalf("client certificate not loaded: %v", err)
	}
}

// TestLoadFileReadsReferencedFilesItself: by default the loader reads the
// files a kubeconfig names once, through its checks, and hands client-go
// their content, so nothing swapped in after the check is ever read.
func TestLoadFileReadsReferencedFilesItself(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kube")
	selfSigned(t, dir)
	writeFile(t, filepath.Join(dir, "config"), []byte(relativePathsKubeconfig))
	cfgs, err := LoadFile(filepath.Join(dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	byCert, byToken := cfgs[0].Config, cfgs[1].Config
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	key, _ := os.ReadFile(filepath.Join(dir, "client.key"))
	if byCert.CAFile != "" || byCert.CertFile != "" || byCert.KeyFile != "" || string(byCert.CAData) != string(ca) || string(byCert.KeyData) != string(key) {
		t.Errorf("certificate files not read by the loader: %+v", byCert.TLSClientConfig)
	}
	if byToken.BearerTokenFile != "" || byToken.BearerToken != "file-token" {
		t.Errorf("token file not read by the loader: file %q, token read: %v", byToken.BearerTokenFile, byToken.BearerToken == "file-token")
	}
	if _, err := rest.TLSConfigFor(byCert); err != nil {
		t.Errorf("TLSConfigFor: %v", err)
	}
}

// secretVolume lays out dir the way the kubelet mounts a Secret: the files
// in a timestamped hidden directory, "..data" pointing at it, and one
// top-level symlink per key through "..data".
func secretVolume(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	ts := "..2026_11_21_10_00_00.123456789"
	for name, data := range files {
		writeFile(t, filepath.Join(dir, ts, name), data)
	}
	symlink(t, ts, filepath.Join(dir, "..data"))
	for name := range files {
		symlink(t, filepath.Join("..data", name), filepath.Join(dir, name))
	}
}

func TestLoadSecretVolume(t *testing.T) {
	dir := t.TempDir()
	certs := t.TempDir()
	selfSigned(t, certs)
	files := map[string][]byte{"config": []byte(relativePathsKubeconfig)}
	for _, name := range []string{"ca.crt", "client.crt", "client.key", "token"} {
		data, err := os.ReadFile(filepath.Join(certs, name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
	files["other"] = kubeconfig(t, ctxSpec{"other", "https://127.0.0.1:7000", "t"})
	secretVolume(t, dir, files)

	cfgs, err := LoadConfigsFromConfigFile(dir)
	if err != nil {
		t.Fatalf("certificate and token files must not count as broken kubeconfigs: %v", err)
	}
	if got := names(cfgs); !slices.Equal(got, []string{"by-cert", "by-token-file", "other"}) {
		t.Fatalf("configs = %v", got)
	}
	if want := filepath.Join(dir, "config"); cfgs[0].Source.File != want {
		t.Errorf("Source.File = %q, want %q", cfgs[0].Source.File, want)
	}
	// Read through the top-level symlink and "..data": inside the volume.
	if string(cfgs[0].Config.CAData) != string(files["ca.crt"]) || cfgs[0].Config.CAFile != "" {
		t.Errorf("CA not read from the volume: CAFile %q", cfgs[0].Config.CAFile)
	}
	if _, err := rest.TLSConfigFor(cfgs[0].Config); err != nil {
		t.Errorf("TLSConfigFor: %v", err)
	}
}

func TestKubeconfigFiles(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir()
	writeFile(t, filepath.Join(dir, "b.yaml"), nil)
	writeFile(t, filepath.Join(dir, "a"), nil)
	writeFile(t, filepath.Join(dir, ".hidden"), nil)
	writeFile(t, filepath.Join(dir, "..2026_11_21_10_00_00.1", "config"), nil)
	symlink(t, "..2026_11_21_10_00_00.1", filepath.Join(dir, "..data"))
	writeFile(t, filepath.Join(dir, "sub", "config"), nil)
	writeFile(t, filepath.Join(elsewhere, "target"), nil)
	symlink(t, filepath.Join(elsewhere, "target"), filepath.Join(dir, "c-link"))
	symlink(t, "..data/config", filepath.Join(dir, "d-through-data"))
	symlink(t, elsewhere, filepath.Join(dir, "e-link-to-dir"))
	symlink(t, "nowhere", filepath.Join(dir, "f-dangling"))

	got, err := KubeconfigFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	entries := []string{"a", "b.yaml", "c-link", "d-through-data"}
	want := make([]string, 0, len(entries))
	for _, n := range entries {
		want = append(want, filepath.Join(dir, n))
	}
	if !slices.Equal(got, want) {
		t.Errorf("KubeconfigFiles = %v, want %v", got, want)
	}

	single := filepath.Join(dir, "a")
	if got, err := KubeconfigFiles(single); err != nil || !slices.Equal(got, []string{single}) {
		t.Errorf("KubeconfigFiles(file) = %v, %v", got, err)
	}

	missing := filepath.Join(dir, "missing")
	_, err = KubeconfigFiles(missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("KubeconfigFiles(missing) err = %v", err)
	}
	_, err = LoadConfigsFromConfigFile(missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("LoadConfigsFromConfigFile(missing) err = %v", err)
	}
}

func TestLoadDirectoryKeepsGoodFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), kubeconfig(t, ctxSpec{"a1", "https://127.0.0.1:6443", "t"}, ctxSpec{"a2", "https://127.0.0.1:6444", "t"}))
	writeFile(t, filepath.Join(dir, "b-broken.yaml"), []byte("clusters: [oops"))
	writeFile(t, filepath.Join(dir, "c-empty.yaml"), nil)
	writeFile(t, filepath.Join(dir, "d.yaml"), kubeconfig(t, ctxSpec{"d1", "https://127.0.0.1:6445", "t"}))
	writeFile(t, filepath.Join(dir, "e-half.yaml"), []byte(`clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
contexts:
- name: e-good
  context: {cluster: c}
- name: e-bad
  context: {cluster: gone}
`))

	cfgs, err := LoadConfigsFromConfigFile(dir)
	if got, want := names(cfgs), []string{"a1", "a2", "d1", "e-good"}; !slices.Equal(got, want) {
		t.Errorf("configs = %v, want %v", got, want)
	}
	errs := fileErrors(t, err)
	bad := make([]string, 0, len(errs))
	for _, fe := range errs {
		bad = append(bad, filepath.Base(fe.Path)+"/"+fe.Context)
	}
	if want := []string{"b-broken.yaml/", "c-empty.yaml/", "e-half.yaml/e-bad"}; !slices.Equal(bad, want) {
		t.Errorf("errors about %v, want %v", bad, want)
	}
	if !errors.Is(err, ErrInvalidKubeconfig) || !errors.Is(err, ErrNoContexts) {
		t.Errorf("joined error should match both sentinels: %v", err)
	}

	empty := t.TempDir()
	if cfgs, err := LoadConfigsFromConfigFile(empty); err != nil || len(cfgs) != 0 {
		t.Errorf("empty directory: %v, %v", names(cfgs), err)
	}
}

func TestLoadDirectoryDuplicateContext(t *testing.T) {
	// Write the later-sorting file first: the winner must not depend on
	// creation order or directory order.
	dir := t.TempDir()
	second := filepath.Join(dir, "b.yaml")
	first := filepath.Join(dir, "a.yaml")
	writeFile(t, second, kubeconfig(t, ctxSpec{"prod", "https://127.0.0.1:2", "t"}, ctxSpec{"only-b", "https://127.0.0.1:3", "t"}))
	writeFile(t, first, kubeconfig(t, ctxSpec{"prod", "https://127.0.0.1:1", "t"}))

	for range 3 {
		cfgs, err := LoadConfigsFromConfigFile(dir)
		if !errors.Is(err, ErrDuplicateContext) {
			t.Fatalf("err = %v, want ErrDuplicateContext", err)
		}
		if msg := err.Error(); !strings.Contains(msg, first) || !strings.Contains(msg, second) || !strings.Contains(msg, `"prod"`) {
			t.Errorf("message %q should name both files and the context", msg)
		}
		fes := fileErrors(t, err)
		if len(fes) != 1 || fes[0].Path != second || fes[0].OtherPath != first || fes[0].Context != "prod" {
			t.Errorf("errors = %+v", fes)
		}
		if got := names(cfgs); !slices.Equal(got, []string{"only-b", "prod"}) {
			t.Fatalf("configs = %v", got)
		}
		if prod := cfgs[1]; prod.Source.File != first || prod.Config.Host != "https://127.0.0.1:1" {
			t.Errorf("prod comes from %s (%s), want %s", prod.Source.File, prod.Config.Host, first)
		}
	}
}

func TestMergeFileConfigsIsOrderIndependent(t *testing.T) {
	mk := func(path, name string) *NamedConfig {
		return &NamedConfig{Name: name, Config: &rest.Config{Host: "https://" + path}, Source: Source{File: path, Context: name}}
	}
	broken := &FileError{Path: "/d/z", Err: ErrInvalidKubeconfig}
	in := []FileConfigs{
		{Path: "/d/c", Configs: []*NamedConfig{mk("/d/c", "x"), mk("/d/c", "y")}},
		{Path: "/d/a", Configs: []*NamedConfig{mk("/d/a", "y")}},
		{Path: "/d/z", Err: broken},
		{Path: "/d/b", Configs: []*NamedConfig{mk("/d/b", "x")}},
	}
	var wantNames, wantErr string
	for i := range 4 {
		rotated := append(slices.Clone(in[i:]), in[:i]...)
		out, err := MergeFileConfigs(rotated)
		var got []string
		for _, c := range out {
			got = append(got, c.Name+"@"+c.Source.File)
		}
		if i == 0 {
			wantNames, wantErr = strings.Join(got, ","), err.Error()
			if wantNames != "x@/d/b,y@/d/a" {
				t.Fatalf("merged = %s", wantNames)
			}
			continue
		}
		if strings.Join(got, ",") != wantNames || err.Error() != wantErr {
			t.Errorf("rotation %d: %v / %v", i, got, err)
		}
	}
	if !strings.Contains(wantErr, "/d/z") {
		t.Errorf("broken file missing from %q", wantErr)
	}
}

func TestLoadConfigsFromConfigFileExpandsHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	writeFile(t, filepath.Join(home, ".kube", "config"), kubeconfig(t, ctxSpec{"home", "https://127.0.0.1:6443", "t"}))
	cfgs, err := LoadConfigsFromConfigFile("~/.kube/config")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfgs) != 1 || cfgs[0].Source.File != filepath.Join(home, ".kube", "config") {
		t.Errorf("configs = %v", cfgs)
	}
}

// FuzzLoadFile feeds arbitrary bytes to LoadFile as a file on disk. Whatever
// the input, LoadFile must not panic, and what it returns must be usable:
// named, sorted, with a host, sourced from the file, no auth plugins.
func FuzzLoadFile(f *testing.F) {
	f.Add(kubeconfig(f, ctxSpec{"a", "https://127.0.0.1:6443", "t"}, ctxSpec{"b", "https://127.0.0.1:6444", "t"}))
	f.Add([]byte(relativePathsKubeconfig))
	f.Add([]byte("clusters: [oops"))
	f.Add([]byte(""))
	f.Add([]byte("contexts:\n- name: x\n  context: {cluster: c, user: u}\nclusters:\n- name: c\n  cluster: {server: https://h}\nusers:\n- name: u\n  user: {exec: {command: x, apiVersion: client.authentication.k8s.io/v1}}\n"))
	f.Add([]byte("contexts:\n- name: \"\"\n  context: {cluster: c}\n- name: \"\"\n  context: {cluster: c}\nclusters:\n- name: c\n  cluster: {server: \"http://h\", proxy-url: \"://\"}\n"))
	// One file for all runs: a worker runs its inputs one at a time, and a
	// directory per input would make each run (and minimization) slower.
	path := filepath.Join(f.TempDir(), "config")
	f.Fuzz(func(t *testing.T, data []byte) {
		writeFile(t, path, data)
		cfgs, err := LoadFile(path)
		for i, c := range cfgs {
			if c == nil || c.Config == nil || c.Name == "" || c.Config.Host == "" {
				t.Fatalf("unusable config %d: %+v", i, c)
			}
			if i > 0 && cfgs[i-1].Name >= c.Name {
				t.Fatalf("configs not sorted or not unique: %v", names(cfgs))
			}
			if c.Source != (Source{File: path, Context: c.Name}) {
				t.Fatalf("source = %+v", c.Source)
			}
			if c.Config.ExecProvider != nil || c.Config.AuthProvider != nil {
				t.Fatalf("auth plugin accepted without AllowAuthPlugins")
			}
			_ = c.Fingerprint()
		}
		if err != nil {
			for _, fe := range fileErrors(t, err) {
				if fe.Path != path {
					t.Fatalf("error about %q, want %q", fe.Path, path)
				}
			}
			_ = err.Error()
		}
	})
}

// TestExplicitlyNoContexts: a kubeconfig that says it has no contexts
// ("kubectl config delete-context" of the last one leaves "contexts: null"
// next to its clusters and users) is no error, while one that merely lacks
// them (empty, or cut off around "contexts:") is ErrNoContexts.
func TestExplicitlyNoContexts(t *testing.T) {
	const rest = "apiVersion: v1\nclusters:\n- cluster: {server: \"https://127.0.0.1:1\"}\n  name: c\n"
	const users = "current-context: a\nkind: Config\nusers:\n- name: u\n  user: {token: t}\n"
	for name, content := range map[string]string{
		"kubectl's null": rest + "contexts: null\n" + users,
		"tilde":          rest + "contexts: ~\n" + users,
		"empty list":     rest + "contexts: []\n" + users,
		"json":           `{"apiVersion": "v1", "kind": "Config", "contexts": [], "clusters": []}`,
	} {
		p := filepath.Join(t.TempDir(), "config")
		writeFile(t, p, []byte(content))
		if cfgs, err := LoadFile(p); err != nil || len(cfgs) != 0 {
			t.Errorf("%s: %v, %v; want no configs and no error", name, names(cfgs), err)
		}
	}
	for name, content := range map[string]string{
		"empty":             "",
		"no contexts key":   rest,
		"cut after key":     rest + "contexts:\n",
		"cut after key, ws": rest + "contexts:   \n",
		"users only":        "kind: Config\n" + users,
	} {
		p := filepath.Join(t.TempDir(), "config")
		writeFile(t, p, []byte(content))
		if cfgs, err := LoadFile(p); !errors.Is(err, ErrNoContexts) || len(cfgs) != 0 {
			t.Errorf("%s: %v, %v; want ErrNoContexts", name, names(cfgs), err)
		}
	}
}
