package config

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// outsideSecret marks content that lives outside every watched directory
// (the controller's own ServiceAccount token, say).
const outsideSecret = "sa-token-OUTSIDE-SECRET-0123456789"

// refKubeconfig is a kubeconfig whose user (or cluster) names files.
func refKubeconfig(name, server, cluster, user string) []byte {
	if cluster == "" {
		cluster = ", insecure-skip-tls-verify: true"
	}
	return []byte(`clusters:
- name: ` + name + `
  cluster: {server: "` + server + `"` + cluster + `}
users:
- name: ` + name + `
  user: {` + user + `}
contexts:
- name: ` + name + `
  context: {cluster: ` + name + `, user: ` + name + `}
`)
}

// TestDirectoryFileReferencesStayInside: in a directory every file path of
// a kubeconfig must resolve, after symlinks, inside the kubeconfig's own
// directory; the refusal names file, context and field, never the content.
func TestDirectoryFileReferencesStayInside(t *testing.T) {
	outside := t.TempDir()
	secretFile := filepath.Join(outside, "token")
	writeFile(t, secretFile, []byte(outsideSecret))
	certs := t.TempDir()
	selfSigned(t, certs)

	dir := t.TempDir()
	cases := map[string]struct{ field, cluster, user string }{
		"token-abs":  {"tokenFile", "", "tokenFile: " + secretFile},
		"token-link": {"tokenFile", "", "tokenFile: link-out"},
		"ca":         {"certificate-authority", ", certificate-authority: " + filepath.Join(certs, "ca.crt"), "token: t"},
		"cert":       {"client-certificate", "", "client-certificate: " + filepath.Join(certs, "client.crt") + ", client-key: client.key"},
		"key":        {"client-key", "", "client-certificate: client.crt, client-key: " + filepath.Join(certs, "client.key")},
	}
	// Files inside the directory that the good kubeconfigs name.
	for _, n := range []string{"client.crt", "client.key"} {
		data, _ := os.ReadFile(filepath.Join(certs, n))
		writeFile(t, filepath.Join(dir, "data", n), data)
	}
	symlink(t, secretFile, filepath.Join(dir, "data", "link-out"))
	// A relative path that climbs out of dir/data into outside.
	if rel, err := filepath.Rel(filepath.Join(dir, "data"), secretFile); err == nil {
		cases["token-rel"] = struct{ field, cluster, user string }{"tokenFile", "", "tokenFile: " + rel}
	}
	for name, c := range cases {
		writeFile(t, filepath.Join(dir, "data", name+".kubeconfig"), refKubeconfig(name, "https://127.0.0.1:6443", c.cluster, c.user))
	}
	writeFile(t, filepath.Join(dir, "data", "good.kubeconfig"), refKubeconfig("good", "https://127.0.0.1:6443", "", "client-certificate: client.crt, client-key: client.key"))

	cfgs, err := LoadConfigsFromConfigFile(filepath.Join(dir, "data"))
	if got := names(cfgs); !slices.Equal(got, []string{"good"}) {
		t.Errorf("configs = %v, want [good]", got)
	}
	refused := map[string]bool{}
	for _, fe := range fileErrors(t, err) {
		if !errors.Is(fe, ErrFileReferenceRefused) {
			t.Errorf("unexpected error: %v", fe)
			continue
		}
		if fe.Context == "" && fe.Path == filepath.Join(dir, "data", "link-out") {
			continue // the link itself, in the directory, is no kubeconfig to read
		}
		c, ok := cases[fe.Context]
		msg := fe.Error()
		if !ok || !strings.Contains(msg, fe.Path) || !strings.Contains(msg, `context "`+fe.Context+`"`) || !strings.Contains(msg, c.field) {
			t.Errorf("error does not name file, context and field %q: %v", c.field, msg)
		}
		if strings.Contains(msg, outsideSecret) || strings.Contains(msg, "PRIVATE") {
			t.Errorf("error quotes a file's content: %v", msg)
		}
		refused[fe.Context] = true
	}
	for name := range cases {
		if !refused[name] {
			t.Errorf("%s: not refused", name)
		}
	}

	// Allowed places load, and are left to client-go.
	cfgs, err = LoadConfigsFromConfigFile(filepath.Join(dir, "data"), AllowFileReferences(outside, certs))
	if err != nil {
		t.Fatalf("with AllowFileReferences: %v", err)
	}
	if len(cfgs) != len(cases)+1 {
		t.Errorf("with AllowFileReferences: configs = %v", names(cfgs))
	}
	for _, c := range cfgs {
		if c.Name == "token-abs" && c.Config.BearerTokenFile != secretFile {
			t.Errorf("allowed token file not left to client-go: %q", c.Config.BearerTokenFile)
		}
	}
	// A root elsewhere does not allow this one.
	if _, err := LoadConfigsFromConfigFile(filepath.Join(dir, "data"), AllowFileReferences(t.TempDir())); !errors.Is(err, ErrFileReferenceRefused) {
		t.Errorf("unrelated root: err = %v", err)
	}

	// A single file the user names keeps kubectl's behaviour.
	single, err := LoadConfigsFromConfigFile(filepath.Join(dir, "data", "token-abs.kubeconfig"))
	if err != nil || len(single) != 1 || single[0].Config.BearerTokenFile != secretFile {
		t.Errorf("single file: %v, %v", names(single), err)
	}
	// LoadFile, the watcher's building block, is a directory's rule.
	if _, err := LoadFile(filepath.Join(dir, "data", "token-abs.kubeconfig")); !errors.Is(err, ErrFileReferenceRefused) {
		t.Errorf("LoadFile: err = %v, want ErrFileReferenceRefused", err)
	}
}

// TestTokenFileIsNeverSentToAnAttacker plays the attacker: a TLS server
// named by kubeconfigs dropped into a directory, which records every
// Authorization header it is sent. The controller's token lives outside the
// directory; kubeconfigs reach for it directly, through a symlink, and by
// swapping a checked token file for a link after loading. The same holds
// when the caller allows other places (AllowFileReferences with roots):
// the kubeconfig's own directory is not one of them, and a file there is
// still read once, by mccr, not left to client-go to read again later.
func TestTokenFileIsNeverSentToAnAttacker(t *testing.T) {
	t.Run("default", func(t *testing.T) { tokenFileNeverSent(t) })
	t.Run("other roots allowed", func(t *testing.T) { tokenFileNeverSent(t, AllowFileReferences(t.TempDir())) })
}

// attackerServer is a TLS server that kubeconfigs under test name, which
// records the Authorization header of every request it is sent.
type attackerServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newAttackerServer(t *testing.T) *attackerServer {
	a := &attackerServer{}
	a.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Header.Get("Authorization"))
		a.mu.Unlock()
		_, _ = w.Write([]byte(`{"major":"1","minor":"37"}`))
	}))
	t.Cleanup(a.Close)
	return a
}

// callEach sends one request through each config, as its member would, and
// returns the Authorization headers the server saw.
func (a *attackerServer) callEach(t *testing.T, cfgs []*NamedConfig) []string {
	t.Helper()
	for _, c := range cfgs {
		rt, err := rest.TransportFor(c.Config)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		req, _ := http.NewRequest(http.MethodGet, a.URL+"/version", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		_ = resp.Body.Close() // best effort: only the request's header is checked
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

func tokenFileNeverSent(t *testing.T, opts ...LoadOption) {
	attacker := newAttackerServer(t)

	outside := t.TempDir()
	secretFile := filepath.Join(outside, "token")
	writeFile(t, secretFile, []byte(outsideSecret+"\n"))
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "direct.kubeconfig"), refKubeconfig("direct", attacker.URL, "", "tokenFile: "+secretFile))
	symlink(t, secretFile, filepath.Join(dir, "link-token"))
	writeFile(t, filepath.Join(dir, "link.kubeconfig"), refKubeconfig("link", attacker.URL, "", "tokenFile: link-token"))
	writeFile(t, filepath.Join(dir, "swap-token"), []byte("inside-token\n"))
	writeFile(t, filepath.Join(dir, "swap.kubeconfig"), refKubeconfig("swap", attacker.URL, "", "tokenFile: swap-token"))

	cfgs, err := LoadConfigsFromConfigFile(dir, opts...)
	if !errors.Is(err, ErrFileReferenceRefused) {
		t.Errorf("err = %v, want ErrFileReferenceRefused", err)
	}
	if err != nil && strings.Contains(err.Error(), outsideSecret) {
		t.Errorf("error quotes the token: %v", err)
	}
	// After the load, the checked token becomes a link to the outside.
	if err := os.Remove(filepath.Join(dir, "swap-token")); err != nil {
		t.Fatal(err)
	}
	symlink(t, secretFile, filepath.Join(dir, "swap-token"))

	seen := attacker.callEach(t, cfgs)
	if got := names(cfgs); !slices.Equal(got, []string{"swap"}) {
		t.Errorf("configs = %v, want [swap]", got)
	}
	for _, h := range seen {
		if strings.Contains(h, outsideSecret) {
			t.Fatalf("the attacker received the outside token: %q", h)
		}
	}
	if !slices.Equal(seen, []string{"Bearer inside-token"}) {
		t.Errorf("attacker saw %q, want the checked inside token once", seen)
	}
	for _, c := range cfgs {
		if want := []string{filepath.Join(dir, "swap-token")}; c.Config.BearerTokenFile != "" || !slices.Equal(c.FilesRead(), want) {
			t.Errorf("%s: token file left to client-go (%q), FilesRead %q, want the content and %q", c.Name, c.Config.BearerTokenFile, c.FilesRead(), want)
		}
	}
}

// TestPasswordInServerURLIsRedacted: a password in a server URL appears in
// no error; RedactURL and Redact hide userinfo, tokens and keys.
func TestPasswordInServerURLIsRedacted(t *testing.T) {
	dir := t.TempDir()
	for i, server := range []string{
		"https://admin:hunter2secret@127.0.0.1:bad",
		"https://admin:hunter2secret@[::1",
		"https://admin:hunter2secret@127.0.0.1:6443/%zz",
	} {
		writeFile(t, filepath.Join(dir, string(rune('a'+i))), refKubeconfig(string(rune('a'+i)), server, "", "token: t"))
	}
	_, err := LoadConfigsFromConfigFile(dir)
	if err == nil {
		t.Fatal("no error for broken server URLs")
	}
	if strings.Contains(err.Error(), "hunter2secret") {
		t.Errorf("error quotes the password: %v", err)
	}

	for in, want := range map[string]string{
		"https://admin:secret@host:6443":        "https://REDACTED@host:6443",
		"https://token@host/path?access=abc":    "https://REDACTED@host/path?access=REDACTED",
		"https://host:6443":                     "https://host:6443",
		"admin:secret@host:6443":                "REDACTED@host:6443",
		"host:6443":                             "host:6443",
		"https://admin:secret@host:bad%zzport/": "https://REDACTED@host:bad%zzport/",
		"https://admin:se@cret@host:6443":       "https://REDACTED@host:6443",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
	for _, in := range []string{
		`Get "https://admin:s3cretpw@h/api": dial tcp: refused`,
		// Go's URL parser takes '@' in a password (it splits at the last
		// one), and so does client-go: the whole userinfo goes.
		`Get "https://admin:pw@s3cretpw@h/api": dial tcp: refused`,
		`proxyconnect tcp socks5://u:a@s3cretpw@proxy:1080 refused`,
		`API server https://admin:s3cretpw@h unreachable`,
		`Authorization: Bearer s3cretpw`,
		`password: s3cretpw`,
		`token=s3cretpw&x=1`,
		"key: -----BEGIN EC PRIVATE KEY-----\ns3cretpw\n-----END EC PRIVATE KEY-----",
	} {
		if got := Redact(in); strings.Contains(got, "s3cretpw") || !strings.Contains(got, "REDACTED") {
			t.Errorf("Redact(%q) = %q", in, got)
		}
	}
	if got := Redact("kubeconfig /a/b, context \"x\": tokenFile /a/t leads out of /a"); strings.Contains(got, "REDACTED") {
		t.Errorf("Redact changed a harmless message: %q", got)
	}

	base := errors.New("https://admin:s3cretpw@h refused")
	wrapped := RedactError(base)
	if strings.Contains(wrapped.Error(), "s3cretpw") || !errors.Is(wrapped, base) {
		t.Errorf("RedactError: %v (Is: %v)", wrapped, errors.Is(wrapped, base))
	}
	nc := NewNamedConfig("a", &rest.Config{Host: "https://admin:s3cretpw@h:6443", BearerToken: "s3cretpw"})
	if got := nc.Redacted(); strings.Contains(got, "s3cretpw") || !strings.Contains(got, "h:6443") {
		t.Errorf("Redacted() = %q", got)
	}
}

// TestEditorFilesAreSkipped: editor, backup and package-manager leftovers
// in a directory are not kubeconfigs, even when they parse as one.
func TestEditorFilesAreSkipped(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "prod.kubeconfig"), kubeconfig(t, ctxSpec{"prod", "https://127.0.0.1:6443", "t"}))
	leftovers := []string{
		"#prod.kubeconfig#", "prod.kubeconfig~", ".prod.kubeconfig.swp", "prod.kubeconfig.swp",
		".prod.kubeconfig.swo", "prod.kubeconfig.swx", "prod.kubeconfig.bak", "prod.kubeconfig.orig",
		"prod.kubeconfig.tmp", "4913", "prod.kubeconfig.rej", "prod.kubeconfig.dpkg-old",
		"prod.kubeconfig.rpmnew", "prod.kubeconfig.BAK", ".#prod.kubeconfig",
		"prod.kubeconfig.lock", "config.LOCK", "sedAb12Cd", "sed0q9XzZ",
	}
	for i, n := range leftovers {
		writeFile(t, filepath.Join(dir, n), kubeconfig(t, ctxSpec{"leftover-" + string(rune('a'+i)), "https://127.0.0.1:6443", "t"}))
	}
	cfgs, err := LoadConfigsFromConfigFile(dir)
	if err != nil || !slices.Equal(names(cfgs), []string{"prod"}) {
		t.Errorf("configs = %v, err = %v; want only prod", names(cfgs), err)
	}
	for _, n := range leftovers {
		if !SkippedName(n) {
			t.Errorf("SkippedName(%q) = false", n)
		}
	}
	for _, n := range []string{"prod", "prod.kubeconfig", "config", "a.yaml", "49130", "swp", "sed", "sedAb12C", "sedAb12Cd3", "sed-ab12c", "lock", "sedona.yaml"} {
		if SkippedName(n) {
			t.Errorf("SkippedName(%q) = true", n)
		}
	}
}

// TestPseudoFilesAreNotRead: a kubeconfig entry that is a link to a file
// reporting a size it does not have (/proc) is refused unread.
func TestPseudoFilesAreNotRead(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("this OS has no /proc/self/environ, the pseudo-file the test links to")
	}
	dir := t.TempDir()
	symlink(t, "/proc/self/environ", filepath.Join(dir, "environ"))
	writeFile(t, filepath.Join(dir, "x.kubeconfig"), refKubeconfig("x", "https://127.0.0.1:6443", "", "tokenFile: environ"))
	_, err := LoadConfigsFromConfigFile(dir)
	if !errors.Is(err, ErrFileReferenceRefused) {
		t.Errorf("err = %v", err)
	}
	// Even where links to /proc are allowed, a pseudo-file is not read.
	cfgs, err := LoadConfigsFromConfigFile(dir, AllowFileReferences("/proc"))
	if len(cfgs) != 0 || len(fileErrors(t, err)) != 2 || !strings.Contains(err.Error(), "pseudo-file") {
		t.Errorf("allowed /proc: %v, %v", names(cfgs), err)
	}
	if _, err := LoadFile(filepath.Join(dir, "environ")); !errors.Is(err, ErrInvalidKubeconfig) || !strings.Contains(err.Error(), "pseudo-file") {
		t.Errorf("environ as a kubeconfig: %v", err)
	}
}

// FuzzLoadDirectory builds a directory tree from ops — kubeconfigs naming
// files, plain files, sub-directories and symlinks to places inside and
// outside (a secret next door, /proc, /dev, loops, nothing) — and loads it.
// Whatever the tree, nothing outside it may end up in a config or an error,
// every config must have had its files read by the loader, and loading
// must end.
func FuzzLoadDirectory(f *testing.F) {
	f.Add([]byte{1, 1, 2, 0, 1, 2}, []byte("x"))
	f.Add([]byte{2, 3, 1, 4, 1, 0, 3, 5}, []byte("tok"))
	f.Add([]byte{3, 4, 4, 6, 2, 6, 1, 3}, []byte("clusters: ["))
	f.Add([]byte{2, 9, 2, 10, 1, 9, 1, 10}, []byte{})
	f.Fuzz(func(t *testing.T, ops, content []byte) {
		if len(ops) > 32 {
			ops = ops[:32]
		}
		root := t.TempDir()
		dir, outside := filepath.Join(root, "src"), filepath.Join(root, "out")
		writeFile(t, filepath.Join(outside, "secret"), []byte(outsideSecret))
		writeFile(t, filepath.Join(outside, "kc"), refKubeconfig("outside", "https://127.0.0.1:6443", "", "tokenFile: secret"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		entries := []string{"a", "b.yaml", "tok", "sub", "..data", "sub/c", "sub/tok", "c~"}
		targets := []string{
			"tok", "sub/tok", "..data/tok", "a", "sub", "../out/secret", filepath.Join(outside, "secret"),
			filepath.Join(outside, "kc"), "/proc/self/environ", "/dev/zero", "loop", "nowhere", "..data",
		}
		for i := 0; i+1 < len(ops); i += 2 {
			name := filepath.Join(dir, entries[int(ops[i+1])%len(entries)])
			target := targets[int(ops[i+1])%len(targets)]
			_ = os.MkdirAll(filepath.Dir(name), 0o755)
			switch ops[i] % 5 {
			case 0:
				_ = os.WriteFile(name, content, 0o600)
			case 1:
				_ = os.WriteFile(name, refKubeconfig(filepath.Base(name), "https://127.0.0.1:6443", "", "tokenFile: "+target), 0o600)
			case 2:
				_ = os.Symlink(target, name)
			case 3:
				_ = os.MkdirAll(name, 0o755)
			default:
				_ = os.WriteFile(name, refKubeconfig(filepath.Base(name), "https://127.0.0.1:6443", ", certificate-authority: "+target, "token: t"), 0o600)
			}
		}
		_ = os.Symlink("loop", filepath.Join(dir, "loop"))

		cfgs, err := LoadConfigsFromConfigFile(dir)
		for _, c := range cfgs {
			cfg := c.Config
			if cfg.BearerTokenFile != "" || cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" {
				t.Fatalf("%s: a file left for client-go to read: %+v", c.Name, cfg.TLSClientConfig)
			}
			for _, v := range []string{cfg.BearerToken, string(cfg.CAData), string(cfg.CertData), string(cfg.KeyData)} {
				if strings.Contains(v, outsideSecret) {
					t.Fatalf("%s: carries the outside secret", c.Name)
				}
			}
			if c.Name == "outside" {
				t.Fatalf("a kubeconfig outside the directory was loaded")
			}
		}
		if err != nil && strings.Contains(err.Error(), outsideSecret) {
			t.Fatalf("error discloses the outside secret: %v", err)
		}
	})
}

// TestTokenFileLinkedIntoARootIsReadOnce: with AllowFileReferences(root),
// a kubeconfig's tokenFile that reaches a file of the root through a link
// of its own directory, or of any other place, is read once by mccr: the
// link's writer may point it at the controller's token after the check.
// A file named in the root itself is left to client-go, which reads it
// again as it changes.
func TestTokenFileLinkedIntoARootIsReadOnce(t *testing.T) {
	attacker := newAttackerServer(t)

	secretFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, secretFile, []byte(outsideSecret+"\n"))
	root := t.TempDir()
	rootToken := filepath.Join(root, "token")
	writeFile(t, rootToken, []byte("root-token\n"))
	elsewhere := t.TempDir()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "files"), 0o700); err != nil { // the loader reads the directory's files alone
		t.Fatal(err)
	}
	links := []string{filepath.Join(dir, "files", "tok"), filepath.Join(elsewhere, "tok")}
	for _, l := range links {
		symlink(t, rootToken, l)
	}
	symlink(t, root, filepath.Join(dir, "files", "rootdir"))
	writeFile(t, filepath.Join(dir, "own.kubeconfig"), refKubeconfig("own", attacker.URL, "", "tokenFile: files/tok"))
	writeFile(t, filepath.Join(dir, "other.kubeconfig"), refKubeconfig("other", attacker.URL, "", "tokenFile: "+links[1]))
	writeFile(t, filepath.Join(dir, "viadir.kubeconfig"), refKubeconfig("viadir", attacker.URL, "", "tokenFile: files/rootdir/token"))
	writeFile(t, filepath.Join(dir, "root.kubeconfig"), refKubeconfig("root", attacker.URL, "", "tokenFile: "+rootToken))

	cfgs, err := LoadConfigsFromConfigFile(dir, AllowFileReferences(root))
	if err != nil {
		t.Fatal(err)
	}
	// After the load, every link the kubeconfigs' writers own leads to the
	// controller's token.
	for _, l := range links {
		if err := os.Remove(l); err != nil {
			t.Fatal(err)
		}
		symlink(t, secretFile, l)
	}
	if err := os.Remove(filepath.Join(dir, "files", "rootdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "files", "rootdir"), 0o700); err != nil {
		t.Fatal(err)
	}
	symlink(t, secretFile, filepath.Join(dir, "files", "rootdir", "token"))

	for _, c := range cfgs {
		want := ""
		if c.Name == "root" {
			want = rootToken
		}
		if c.Config.BearerTokenFile != want {
			t.Errorf("%s: BearerTokenFile = %q, want %q", c.Name, c.Config.BearerTokenFile, want)
		}
	}
	seen := attacker.callEach(t, cfgs)
	if len(seen) != 4 {
		t.Errorf("attacker saw %d requests, want 4", len(seen))
	}
	for _, h := range seen {
		if h != "Bearer root-token" {
			t.Errorf("attacker saw %q, want the root's token as checked", h)
		}
	}
}
