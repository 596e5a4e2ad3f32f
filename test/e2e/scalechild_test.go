package e2e

import (
	"bytes"
	"cmp"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mccr-dev/mccr/config"
)

// A scale run measures a process's memory and goroutines, so it runs in a
// process of its own: this test binary again, running only
// TestScaleChild, without a fleet of its own (TestMain), reaching the
// package's API servers and endpoints through kubeconfig files. What a
// process did before (an engine started and stopped, another engine's
// one-off initialisation, a heap grown and fragmented) then counts for
// neither engine, and every run of either starts from the same state.

// scaleSpecEnv names the file holding a child's scaleSpec.
const scaleSpecEnv = "MCCR_E2E_SCALE_SPEC"

// scaleSpec is what a child runs, and where it writes its figures: a scale
// run, or, with Burst, a noisy neighbour's burst of writes
// (neighbour_bench_test.go).
type scaleSpec struct {
	Burst       *neighbourBurst `json:",omitempty"`
	Scale       scale
	Namespace   string
	Host        string   // kubeconfig of the Server's host cluster
	Kubeconfigs []string // one per cluster, Clusters+More of them
	Figures     string   // where the child writes its scaleFigures
}

// isScaleChild tells TestMain that this process is a scale run's child.
func isScaleChild() bool { return os.Getenv(scaleSpecEnv) != "" }

// runScale runs s in a child process and returns what it measured.
func runScale(tb testing.TB, s scale, ns string, kubeconfigs []string) scaleFigures {
	tb.Helper()
	dir := tb.TempDir()
	spec := scaleSpec{Scale: s, Namespace: ns, Host: fleet.Cluster("host").KubeconfigPath, Kubeconfigs: kubeconfigs,
		Figures: filepath.Join(dir, "figures.json")}
	cmd := childCommand(tb, dir, spec)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tb.Fatalf("scale run %+v in a child process: %v\n%s", s, err, out.Bytes())
	}
	raw, err := os.ReadFile(spec.Figures)
	if err != nil {
		tb.Fatalf("scale run %+v wrote no figures: %v\n%s", s, err, out.Bytes())
	}
	var fig scaleFigures
	if err := json.Unmarshal(raw, &fig); err != nil {
		tb.Fatal(err)
	}
	if testing.Verbose() {
		tb.Logf("scale run %+v:\n%s", s, out.Bytes())
	}
	return fig
}

// childCommand returns the command that runs spec in a child process,
// spec written to a file in dir.
func childCommand(tb testing.TB, dir string, spec scaleSpec) *exec.Cmd {
	tb.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		tb.Fatal(err)
	}
	specPath := filepath.Join(dir, "spec.json")
	if err := os.WriteFile(specPath, raw, 0o600); err != nil {
		tb.Fatal(err)
	}
	args := []string{"-test.run=^TestScaleChild$", "-test.v", "-test.timeout=30m"}
	if os.Getenv(profileDirEnv) != "" && spec.Burst == nil {
		// Heap profiles to read per cluster sample every 4 KiB allocated
		// (which slows the run down: set MCCR_SCALE_MEMPROFILERATE=524288,
		// the runtime's default, for CPU profiles).
		rate := cmp.Or(os.Getenv("MCCR_SCALE_MEMPROFILERATE"), "4096")
		args = append(args, "-test.memprofilerate="+rate)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), scaleSpecEnv+"="+specPath)
	return cmd
}

// TestScaleChild is not a test but a scale run's child process: runScale
// starts this binary with -test.run=^TestScaleChild$ and the spec in its
// environment, the helper-process idiom of os/exec's own tests. In any
// other process it returns at once.
func TestScaleChild(t *testing.T) {
	if !isScaleChild() {
		return
	}
	spec := readChildSpec[scaleSpec](t, scaleSpecEnv)
	if spec.Burst != nil {
		runBurst(t, *spec.Burst)
		return
	}
	host := loadOne(t, spec.Host)
	configs := make([]*config.NamedConfig, len(spec.Kubeconfigs))
	for i, p := range spec.Kubeconfigs {
		configs[i] = loadOne(t, p)
	}
	if spec.Scale.Proxied {
		defer behindProxies(t, configs, spec.Scale.AddedRTT)()
	}
	writeChildFigures(t, spec.Figures, measureScale(t, spec.Scale, host.Config, spec.Namespace, configs))
}

// readChildSpec reads the spec of a child process (TestScaleChild,
// TestFleetEngineChild) from the JSON file its parent named in env.
func readChildSpec[T any](t *testing.T, env string) T {
	t.Helper()
	var spec T
	raw, err := os.ReadFile(os.Getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

// writeChildFigures writes what a child process measured to the file its
// parent reads them from.
func writeChildFigures(t *testing.T, path string, fig any) {
	t.Helper()
	raw, err := json.Marshal(fig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

// loadOne loads the one cluster of a kubeconfig file.
func loadOne(tb testing.TB, path string) *config.NamedConfig {
	tb.Helper()
	ncs, err := config.LoadConfigsFromConfigFile(path)
	if err != nil || len(ncs) != 1 {
		tb.Fatalf("%s: %d clusters, %v; want one", path, len(ncs), err)
	}
	return ncs[0]
}
