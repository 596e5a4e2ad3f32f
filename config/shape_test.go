package config

import (
	"crypto/rand"
	"encoding/base64"
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
