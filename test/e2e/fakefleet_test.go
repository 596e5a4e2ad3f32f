package e2e

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fakeapi"
)

// A fake fleet is thousands of in-process fake API servers
// (internal/fakeapi), each on a loopback port of its own, served by helper
// processes: a process may hold 20,000 open files here, and 10,000 clusters
// are a listener and an accepted connection each on the serving side, as
// many connections on the engine's. A helper is this test binary again,
// started under the name fakeFleetArg0: the package's init sees the name,
// serves, and never gets to TestMain (no real fleet is started for it). It
// writes what a client needs on stdout, one line each:
//
//	ca <base64 PEM>                  the certificate every one of its servers presents
//	cluster <name> <URL> <token>     one per server
//	ready                            all of them serve
//
// or "error <reason>", and serves until its stdin closes: the benchmark
// ended, or the process that started it died.
//
// Every server speaks HTTP/2 over TLS, as a kube-apiserver does, so that a
// member reaches its cluster over one connection; the certificate has an
// ECDSA key, whose handshakes cost the helpers little of the two cores
// they share with the engine. The engine's config of each cluster carries
// the CA with a comment line naming the cluster (fakeCluster.config), so
// that no two clusters' TLS settings, and so no transport, are shared, as
// among real clusters.
const (
	fakeFleetArg0 = "mccr-e2e-fake-fleet"
	fakeFleetEnv  = "MCCR_E2E_FAKE_FLEET" // the helper's fakeFleetSpec, JSON
	// fakeFleetPerProcess is how many servers one helper serves: its
	// listeners and accepted connections (one per cluster, and one more
	// while a deleted member's connection closes and another member's
	// opens) stay well under the 20,000 open files a process may have.
	fakeFleetPerProcess = 4000
)

// fakeFleetSpec is what one helper serves.
type fakeFleetSpec struct {
	Parent    int      // the pid of the process it serves
	Names     []string // a server for each
	Namespace string   // holding Objects ConfigMaps in every server
	Objects   int
}

func init() {
	if filepath.Base(os.Args[0]) != fakeFleetArg0 {
		return
	}
	var spec fakeFleetSpec
	if err := json.Unmarshal([]byte(os.Getenv(fakeFleetEnv)), &spec); err != nil {
		fmt.Printf("error reading %s: %v\n", fakeFleetEnv, err)
		os.Exit(2)
	}
	// The parent may have died before the parent-death signal was armed.
	if os.Getppid() != spec.Parent {
		os.Exit(1)
	}
	stopProfile := fakeFleetCPUProfile(spec)
	if err := serveFakeFleet(spec, os.Stdout); err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	stopProfile()
	// Exiting closes every listener and connection at once; closing 4,000
	// servers one by one would only take longer.
	os.Exit(0)
}

// fakeFleetCPUProfile profiles a helper's CPU, from its start until the
// returned function is called, when profileDirEnv says where: the helpers
// share the two cores with the engine, so what they spend is what the
// engine's figures wait on.
func fakeFleetCPUProfile(spec fakeFleetSpec) (stop func()) {
	dir := os.Getenv(profileDirEnv)
	if dir == "" || len(spec.Names) == 0 {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("fake-fleet-%s-%d.cpu.pb.gz", spec.Names[0], len(spec.Names))))
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake fleet helper: no CPU profile: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "fake fleet helper: no CPU profile: %v\n", errors.Join(err, f.Close()))
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// serveFakeFleet starts spec's servers and tells out how to reach them.
func serveFakeFleet(spec fakeFleetSpec, out io.Writer) error {
	cert, err := fakeapi.LoopbackCertificate()
	if err != nil {
		return err
	}
	w := bufio.NewWriter(out)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	fmt.Fprintf(w, "ca %s\n", base64.StdEncoding.EncodeToString(ca))
	objs := fakeFleetObjects(spec.Namespace, spec.Objects)
	for _, name := range spec.Names {
		s := fakeapi.New(fakeapi.WithHTTP2(), fakeapi.WithCertificate(cert), fakeapi.WithHistory(fakeFleetHistory))
		s.Seed(objs...)
		s.Start()
		cfg := s.Config()
		fmt.Fprintf(w, "cluster %s %s %s\n", name, cfg.Host, cfg.BearerToken)
	}
	fmt.Fprintln(w, "ready")
	return w.Flush()
}

// fakeFleetHistory is how many past events a fake server keeps: nobody
// writes to a fake fleet's servers, and a watch that resumes from before
// them lists again, as from a compacted etcd.
const fakeFleetHistory = 16

func fakeFleetObjects(ns string, n int) []runtime.Object {
	objs := make([]runtime.Object, 0, 1+n)
	objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	for i := range n {
		objs = append(objs, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", i)},
			Data:       map[string]string{"index": fmt.Sprint(i)},
		})
	}
	return objs
}

// fakeCluster is how to reach one server of a fake fleet.
type fakeCluster struct {
	Name  string
	Host  string
	Token string
	CA    int // index in fakeFleet.CAs
}

// fakeFleet is a running fake fleet: its helpers and their servers.
type fakeFleet struct {
	CAs      [][]byte // PEM, one per helper
	Clusters []fakeCluster
	helpers  []*exec.Cmd
	stdins   []io.Closer
}

// config is the engine's config for c: its URL, token and its helper's
// CA, with a line naming c so that its TLS settings are its own.
func (f *fakeFleet) config(c fakeCluster) *config.NamedConfig {
	ca := append(append([]byte(nil), f.CAs[c.CA]...), "# fake cluster "+c.Name+"\n"...)
	return config.NewNamedConfig(c.Name, &rest.Config{
		Host:            c.Host,
		BearerToken:     c.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
	})
}

// startFakeFleet serves a fake API server, holding namespace ns with
// objects ConfigMaps, for each name, in as many helpers as it takes. They
// stop when the benchmark ends.
func startFakeFleet(tb testing.TB, names []string, ns string, objects int) *fakeFleet {
	tb.Helper()
	f := &fakeFleet{}
	tb.Cleanup(f.stop)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	n := (len(names) + fakeFleetPerProcess - 1) / fakeFleetPerProcess
	parts := make([][]fakeCluster, n)
	f.CAs = make([][]byte, n)
	for i, chunk := range dealFakeFleet(names, n) {
		cmd, in, out, err := f.startHelper(fakeFleetSpec{Parent: os.Getpid(), Names: chunk, Namespace: ns, Objects: objects})
		if err != nil {
			tb.Fatal(err)
		}
		f.helpers, f.stdins = append(f.helpers, cmd), append(f.stdins, in)
		wg.Go(func() {
			ca, clusters, err := readFakeFleet(out, i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("fake fleet helper %d (pid %d): %w", i, cmd.Process.Pid, err))
				return
			}
			f.CAs[i], parts[i] = ca, clusters
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	clusters, err := gatherFakeFleet(names, parts)
	if err != nil {
		tb.Fatal(err)
	}
	f.Clusters = clusters
	return f
}

// dealFakeFleet deals names round-robin to n helpers (helper i serves
// names i, i+n, i+2n, …), so that starts in any order (the newest first,
// say) keep every helper busy rather than one.
func dealFakeFleet(names []string, n int) [][]string {
	chunks := make([][]string, n)
	for j, name := range names {
		chunks[j%n] = append(chunks[j%n], name)
	}
	return chunks
}

// gatherFakeFleet puts the helpers' clusters (parts[i], helper i's, in the
// order it was dealt them) back in the order of names: name j is helper
// j%n's (j/n)th. A helper that served other names than it was dealt is an
// error, rather than a fleet whose clusters answer for others.
func gatherFakeFleet(names []string, parts [][]fakeCluster) ([]fakeCluster, error) {
	n := len(parts)
	for i, p := range parts {
		if want := (len(names) - i + n - 1) / n; len(p) != want {
			return nil, fmt.Errorf("fake fleet helper %d served %d clusters, want %d", i, len(p), want)
		}
	}
	clusters := make([]fakeCluster, 0, len(names))
	for j, name := range names {
		c := parts[j%n][j/n]
		if c.Name != name {
			return nil, fmt.Errorf("fake fleet helper %d served %q where %q was dealt", j%n, c.Name, name)
		}
		clusters = append(clusters, c)
	}
	return clusters, nil
}

func (f *fakeFleet) startHelper(spec fakeFleetSpec) (*exec.Cmd, io.WriteCloser, io.Reader, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.Command(exe)
	cmd.Args = []string{fakeFleetArg0}
	// Built with -race, the helper would sleep a second on its way out.
	race := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	// One P each: the helpers are three processes beside the engine on
	// two cores, and with a P per core each the operating system shares
	// the cores among eight, whose idle Ps spin looking for work. With one
	// the helpers used 21-22 s of CPU over a 10,000-cluster run instead of
	// 26-31 s, and the engine's starts waited less on them.
	cmd.Env = append(os.Environ(), fakeFleetEnv+"="+string(raw), "GORACE="+race, "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, fmt.Errorf("starting a fake fleet helper: %w", err)
	}
	return cmd, in, out, nil
}

// readFakeFleet reads one helper's answer up to "ready".
func readFakeFleet(out io.Reader, helper int) (ca []byte, clusters []fakeCluster, err error) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "ca":
			if ca, err = base64.StdEncoding.DecodeString(f[1]); err != nil {
				return nil, nil, fmt.Errorf("its CA: %w", err)
			}
		case len(f) == 4 && f[0] == "cluster":
			clusters = append(clusters, fakeCluster{Name: f[1], Host: f[2], Token: f[3], CA: helper})
		case len(f) == 1 && f[0] == "ready":
			if ca == nil {
				return nil, nil, errors.New("ready without a CA")
			}
			return ca, clusters, nil
		default:
			return nil, nil, fmt.Errorf("said %q", sc.Text())
		}
	}
	return nil, nil, fmt.Errorf("ended before it was ready: %w", sc.Err())
}

// rssMiB is the helpers' RSS together, for the log.
func (f *fakeFleet) rssMiB() float64 {
	var kib int64
	for _, cmd := range f.helpers {
		kib += statusKiB(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid), "VmRSS:")
	}
	return float64(kib) / 1024
}

// stop ends the helpers: they exit once their stdin closes, and are
// killed if they have not within a few seconds.
func (f *fakeFleet) stop() {
	for _, in := range f.stdins {
		_ = in.Close()
	}
	for _, cmd := range f.helpers {
		done := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// TestFakeFleetDealtAndGatheredInNameOrder: whatever the fleet's size and
// its number of helpers (one, or more with an uneven split), every name
// is dealt to exactly one helper, no helper gets more than its share, and
// the helpers' clusters come back in the order of the names; a helper that
// answers for other names, or for fewer, is an error.
func TestFakeFleetDealtAndGatheredInNameOrder(t *testing.T) {
	for _, size := range []int{0, 1, 2, 3, 5, 7, 8, 12, 4000, 4001, 8001, 10000} {
		for n := 1; n <= 4; n++ {
			if size > 0 && n > size {
				continue
			}
			names := make([]string, size)
			for j := range names {
				names[j] = fmt.Sprintf("c%05d", j)
			}
			chunks := dealFakeFleet(names, n)
			parts := make([][]fakeCluster, n)
			for i, chunk := range chunks {
				if share := (size + n - 1) / n; len(chunk) > share {
					t.Errorf("%d names, %d helpers: helper %d dealt %d, more than its share %d", size, n, i, len(chunk), share)
				}
				for _, name := range chunk {
					parts[i] = append(parts[i], fakeCluster{Name: name, CA: i})
				}
			}
			got, err := gatherFakeFleet(names, parts)
			if err != nil {
				t.Fatalf("%d names, %d helpers: %v", size, n, err)
			}
			if len(got) != size {
				t.Fatalf("%d names, %d helpers: gathered %d", size, n, len(got))
			}
			for j, c := range got {
				if c.Name != names[j] || c.CA != j%n {
					t.Fatalf("%d names, %d helpers: cluster %d is %q of helper %d, want %q of helper %d", size, n, j, c.Name, c.CA, names[j], j%n)
				}
			}
			if size < 2 || n < 2 {
				continue
			}
			swapped := make([][]fakeCluster, n)
			for i := range parts {
				swapped[i] = append([]fakeCluster(nil), parts[i]...)
			}
			swapped[0][0], swapped[1][0] = swapped[1][0], swapped[0][0]
			if _, err := gatherFakeFleet(names, swapped); err == nil {
				t.Errorf("%d names, %d helpers: two helpers' clusters swapped, gathered without an error", size, n)
			}
			short := append([][]fakeCluster(nil), parts...)
			short[n-1] = short[n-1][:len(short[n-1])-1]
			if _, err := gatherFakeFleet(names, short); err == nil {
				t.Errorf("%d names, %d helpers: a helper short of a cluster, gathered without an error", size, n)
			}
		}
	}

	// And a real one, of one helper.
	names := []string{"e", "d", "c", "b", "a"}
	f := startFakeFleet(t, names, "dealt", 0)
	for j, c := range f.Clusters {
		if c.Name != names[j] || c.Host == "" {
			t.Errorf("cluster %d of a fake fleet is %+v, want %q", j, c, names[j])
		}
	}
	if len(f.Clusters) != len(names) || len(f.helpers) != 1 {
		t.Errorf("%d clusters in %d helpers, want %d in 1", len(f.Clusters), len(f.helpers), len(names))
	}
}
