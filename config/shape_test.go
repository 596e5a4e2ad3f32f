package config

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// allocated is how many bytes the process allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A kubeconfig within the file size bound, made of nothing but YAML nodes,
// is refused before it is decoded: loading it costs about what reading it
// does, not the gigabytes decoding would hold. Nodes written any way count,
// and so do aliases expanded.
func TestKubeconfigOfManyNodesIsRefusedUndecoded(t *testing.T) {
	const size = maxKubeconfigSize - 1024
	fill := func(unit, head, tail string) string {
		return head + strings.Repeat(unit, (size-len(head)-len(tail))/len(unit)) + tail
	}
	shapes := map[string]string{
		"flow list of zeros":   fill("0,", "clusters: [", "0]\n"),
		"nested empty lists":   fill("[],", "clusters: [", "[]]\n"),
		"empty maps":           fill("{},", "clusters: [", "{}]\n"),
		"block list":           fill("- 0\n", "clusters:\n", ""),
		"nested block entries": fill("- ", "clusters:\n", "0\n"),
		"keys":                 fill("a: 0\n", "", ""),
		"JSON":                 fill(`{"a":0},`, `{"clusters":[`, `{}]}`),
		"aliases": "a: &a [" + strings.Repeat("0,", 1000) + "0]\nb: &b [" + strings.Repeat("*a,", 200) + "*a]\n" +
			"clusters: [" + strings.Repeat("*b,", 2000) + "*b]\n",
	}
	for name, doc := range shapes {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config")
			writeFile(t, path, []byte(doc))
			var err error
			cost := allocated(func() { _, err = LoadFile(path) })
			if !errors.Is(err, ErrInvalidKubeconfig) || !strings.Contains(err.Error(), "too many YAML nodes") || !strings.Contains(err.Error(), path) {
				t.Fatalf("LoadFile = %v, want a refusal naming the file and the bound", err)
			}
			t.Logf("%d MiB file refused after %d MiB allocated: %v", len(doc)>>20, cost>>20, err)
			if limit := 2*uint64(len(doc)) + 8<<20; cost > limit {
				t.Errorf("refusing a %d MiB file allocated %d MiB", len(doc)>>20, cost>>20)
			}
		})
	}
}

// The most a kubeconfig just within the node bound costs to decode (the
// bound's comment promises about 100 MiB), and a large real one still
// loads: 2,000 contexts with embedded CA certificates and tokens.
func TestKubeconfigNodeBound(t *testing.T) {
	t.Run("just within", func(t *testing.T) {
		doc := "clusters: [" + strings.Repeat("0,", maxKubeconfigNodes/2-16) + "0]\n"
		var err error
		cost := allocated(func() { _, err = DecodeKubeconfig([]byte(doc)) })
		t.Logf("%d nodes decoded: %d MiB allocated, %v", maxKubeconfigNodes/2, cost>>20, err)
		if errors.Is(err, ErrInvalidKubeconfig) && strings.Contains(err.Error(), "too many YAML nodes") {
			t.Fatalf("refused within the bound: %v", err)
		}
		if cost > 256<<20 {
			t.Errorf("a kubeconfig within the node bound allocated %d MiB to decode", cost>>20)
		}
	})
	t.Run("2,000 contexts", func(t *testing.T) {
		const n = 2000
		kc := clientcmdapi.NewConfig()
		dir := t.TempDir()
		selfSigned(t, dir)
		ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			name := fmt.Sprintf("cluster-%04d", i)
			kc.Clusters[name] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443", CertificateAuthorityData: ca}
			// A service account token's shape: base64url, '-' and '_' in it.
			claims := make([]byte, 700)
			if _, err := rand.Read(claims); err != nil {
				t.Fatal(err)
			}
			kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(claims)}
			kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
		}
		data, err := clientcmd.Write(*kc)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "config")
		writeFile(t, path, data)
		cfgs, err := LoadFile(path)
		if err != nil || len(cfgs) != n {
			t.Fatalf("a %d MiB kubeconfig of %d contexts: %d loaded, %v", len(data)>>20, n, len(cfgs), err)
		}
	})
}

// A kubeconfig of few nodes whose aliases repeat a long scalar is refused
// before it is decoded: an alias costs one node, and the text it stands for
// is written out again for each one, so 400 aliases of a 256 KiB token
// would decode to 100 MiB of JSON (a 16 MiB file, to terabytes).
func TestKubeconfigOfAliasedTextIsRefusedUndecoded(t *testing.T) {
	long := strings.Repeat("x", 256<<10)
	for name, doc := range map[string]string{
		"token": "users:\n- name: a\n  user: {token: &t " + long + "}\n" +
			strings.Repeat("- name: b\n  user: {token: *t}\n", 400),
		"user": "users:\n- &u {name: a, user: {token: " + long + "}}\n" +
			"x: [" + strings.Repeat("*u,", 400) + "*u]\n",
		"certificate through an alias of aliases": "a: &a " + long + "\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n" +
			"clusters: [" + strings.Repeat("*b,", 20) + "*b]\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config")
			writeFile(t, path, []byte(doc))
			var err error
			cost := allocated(func() { _, err = LoadFile(path) })
			if !errors.Is(err, ErrInvalidKubeconfig) || !strings.Contains(err.Error(), "too much YAML text") || !strings.Contains(err.Error(), path) {
				t.Fatalf("LoadFile = %v, want a refusal naming the file and the bound", err)
			}
			if strings.Contains(err.Error(), "xxxx") {
				t.Fatalf("the error quotes the file: %.200s", err)
			}
			if limit := 4*uint64(len(doc)) + 8<<20; cost > limit {
				t.Errorf("refusing a %d KiB file allocated %d MiB", len(doc)>>10, cost>>20)
			}
		})
	}
	t.Run("a shared certificate", func(t *testing.T) {
		// Anchors used as they are meant to be: one CA for many clusters.
		dir := t.TempDir()
		selfSigned(t, dir)
		ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		b.WriteString("clusters:\n")
		for i := range 2000 {
			if i == 0 {
				fmt.Fprintf(&b, "- name: c0\n  cluster: {server: https://h, certificate-authority-data: &ca %s}\n", base64.StdEncoding.EncodeToString(ca))
				continue
			}
			fmt.Fprintf(&b, "- name: c%d\n  cluster: {server: https://h, certificate-authority-data: *ca}\n", i)
		}
		b.WriteString("contexts:\n")
		for i := range 2000 {
			fmt.Fprintf(&b, "- name: c%d\n  context: {cluster: c%d}\n", i, i)
		}
		path := filepath.Join(t.TempDir(), "config")
		writeFile(t, path, []byte(b.String()))
		cfgs, err := LoadFile(path)
		if err != nil || len(cfgs) != 2000 {
			t.Fatalf("2,000 clusters sharing an anchored CA: %d loaded, %v", len(cfgs), err)
		}
	})
}

// Contexts that share a cluster and user share the work of building it and
// its data: 500 contexts naming one cluster with a 3 MiB CA bundle are not
// 500 copies of it (1.5 GiB held, and seconds of parsing each time the
// file is read). Each config is still its own, exec plugin included.
func TestContextsSharingAClusterShareItsData(t *testing.T) {
	dir := t.TempDir()
	selfSigned(t, dir)
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	// A bundle of 3 MiB: the certificate and a block of another kind,
	// which certificate pools skip.
	bundle := append(ca, pem.EncodeToMemory(&pem.Block{Type: "PADDING", Bytes: make([]byte, 3<<20)})...)
	const n = 500
	var b strings.Builder
	b.WriteString("clusters:\n- name: c\n  cluster: {server: https://h, certificate-authority-data: " + base64.StdEncoding.EncodeToString(bundle) + "}\n")
	b.WriteString("users:\n- name: u\n  user: {exec: {command: plugin, apiVersion: client.authentication.k8s.io/v1, interactiveMode: Never}}\ncontexts:\n")
	for i := range n {
		fmt.Fprintf(&b, "- {name: c%03d, context: {cluster: c, user: u}}\n", i)
	}
	data := b.String()
	path := filepath.Join(t.TempDir(), "config")
	writeFile(t, path, []byte(data))
	var cfgs []*NamedConfig
	cost := allocated(func() { cfgs, err = LoadFile(path, AllowAuthPlugins()) })
	if err != nil || len(cfgs) != n {
		t.Fatalf("%d contexts sharing a cluster: %d loaded, %v", n, len(cfgs), err)
	}
	if limit := 16*uint64(len(data)) + 64<<20; cost > limit {
		t.Errorf("loading a %d MiB kubeconfig of %d contexts sharing one cluster allocated %d MiB", len(data)>>20, n, cost>>20)
	}
	for i, c := range cfgs {
		if c.Name != fmt.Sprintf("c%03d", i) || c.Source != (Source{File: path, Context: c.Name}) || !bytes.Equal(c.Config.CAData, bundle) || c.Config.ExecProvider == nil {
			t.Fatalf("config %d: %s, source %+v, CA of %d bytes, exec %v", i, c.Name, c.Source, len(c.Config.CAData), c.Config.ExecProvider)
		}
		if i > 0 && (c.Config == cfgs[0].Config || c.Config.ExecProvider == cfgs[0].Config.ExecProvider) {
			t.Fatalf("configs %d and 0 share their *rest.Config or exec plugin", i)
		}
	}
}
