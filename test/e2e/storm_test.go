package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/test"
)

// stormFile returns the i-th broken kubeconfig of the storm: random bytes,
// a good file cut short, a context pointing at nothing, a second claim on
// a good cluster's context name, an exec user. Every candidate is checked
// with the loader itself (see stormFileIsBad) and drawn again until it is
// broken: a cut can end right after a complete entry and leave a valid
// kubeconfig, and the test must not depend on where a random cut lands.
func stormFile(t testing.TB, rng *rand.Rand, i int, good *rest.Config, owner string) []byte {
	t.Helper()
	for range 1000 {
		if b := stormCandidate(t, rng, i, good); stormFileIsBad(t, owner, b) {
			return b
		}
	}
	t.Fatalf("storm file %d: no broken variant found", i)
	return nil
}

func stormCandidate(t testing.TB, rng *rand.Rand, i int, good *rest.Config) []byte {
	t.Helper()
	valid, err := clientcmd.Write(test.KubeconfigFor(fmt.Sprintf("storm-%d", i), good))
	if err != nil {
		t.Fatal(err)
	}
	switch i % 5 {
	case 0:
		b := make([]byte, 1+rng.IntN(4096))
		for j := range b {
			b[j] = byte(rng.UintN(256) & 0xff)
		}
		return b
	case 1:
		return valid[:rng.IntN(len(valid)/2)+1]
	case 2:
		kc := clientcmdapi.NewConfig()
		kc.Contexts["dangling"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: "nobody"}
		out, _ := clientcmd.Write(*kc)
		return out
	case 3:
		// Claims context "a", which a.kubeconfig owns.
		out, _ := clientcmd.Write(test.KubeconfigFor("a", &rest.Config{Host: "https://127.0.0.1:1", BearerToken: "x"}))
		return out
	default:
		kc := test.KubeconfigFor(fmt.Sprintf("exec-%d", i), good)
		kc.AuthInfos[fmt.Sprintf("exec-%d", i)] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "/bin/false", APIVersion: "client.authentication.k8s.io/v1"}}
		out, _ := clientcmd.Write(kc)
		return out
	}
}

// stormFileIsBad loads data as a kubeconfig next to a copy of owner (the
// kubeconfig of cluster "a") and says whether the loader refuses it by name
// while adding no cluster: exactly what the storm expects of a broken file.
func stormFileIsBad(t testing.TB, owner string, data []byte) bool {
	t.Helper()
	dir := t.TempDir()
	own, err := os.ReadFile(owner)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.kubeconfig"), own, 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "storm.kubeconfig")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfgs, err := config.LoadConfigsFromConfigFile(dir)
	names := make([]string, 0, len(cfgs))
	for _, c := range cfgs {
		names = append(names, c.Name)
	}
	return err != nil && strings.Contains(err.Error(), p) && slices.Equal(names, []string{"a"})
}

// TestFileStormKeepsFleetReconciling throws 1000 broken kubeconfig files
// into a directory the Server watches while two good members have steady
// work: every broken file is reported by name, nothing is added, deleted or
// restarted, and the members miss no reconcile.
func TestFileStormKeepsFleetReconciling(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: slow fault test against real API servers; make test runs it")
	}
	const n = 5
	ns := namespace(t, "storm")
	d := newWatchedDir(t, ns, n)
	dir, r := d.dir, d.r
	w := newWorkload(t, r.rec, ns, n, membersNamed("a", "b"), 2*time.Second)
	w.start()
	rng := rand.New(rand.NewPCG(1, 2))
	const files = 1000
	paths := make([]string, 0, files)
	for i := range files {
		p := filepath.Join(dir, fmt.Sprintf("storm-%04d.kubeconfig", i))
		if err := os.WriteFile(p, stormFile(t, rng, i, fleet.Cluster("a").Config, filepath.Join(dir, "a.kubeconfig")), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	unreported := func() []string { return d.unreported(paths, contains) }
	test.Eventually(t, 60*time.Second, "every broken file reported by name", func() bool { return len(unreported()) == 0 })
	w.waitRounds(t, 3)
	w.stop()
	_, reported := d.stop()
	d.checkUndisturbed(t, "storm", "a", "b")
	if len(r.srv.WatchErrors()) == 0 {
		t.Error("the Server kept none of the watcher's errors")
	}
	w.report(t, "storm: members a, b")
	t.Logf("figure: storm: 1000 broken files, %d errors reported, every file named", len(reported))
}
