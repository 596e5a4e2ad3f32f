package main

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mccr-dev/mccr/sample/syncer/api/v1alpha1"
	"github.com/mccr-dev/mccr/test"
)

// TestCommand builds the program as a user would (with the race detector
// when the tests have it) and runs it on the fleet with its flags: the
// members from a kubeconfig directory it follows, a patrol period of 1s.
// A FleetSetting naming both members is copied into them; a label edited
// by hand is put back by the patroller; a kubeconfig removed takes its
// member out of the status; SIGTERM ends the program with status 0.
func TestCommand(t *testing.T) {
	ns := prepare(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the program: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "syncer")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command(goBin, append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	clusters := t.TempDir()
	for _, m := range []string{"m1", "m2"} {
		kc, err := os.ReadFile(fleet.Cluster(m).KubeconfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(clusters, m+".kubeconfig"), kc, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// The program's output goes to a file, read when the test needs it.
	logFile, err := os.Create(filepath.Join(t.TempDir(), "syncer.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	output := func() string {
		b, _ := os.ReadFile(logFile.Name())
		return string(b)
	}
	cmd := exec.Command(bin,
		"--kubeconfig", fleet.Cluster("host").KubeconfigPath,
		"--clusters", clusters,
		"--patrol-period", "1s",
		"--health-probe-bind-address", "0",
		"--log-json")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("output of the program:\n%s", output())
		}
	})

	key := types.NamespacedName{Namespace: ns, Name: "by-name"}
	labels, data := map[string]string{"tier": "gold"}, map[string]string{"k": "v"}
	createIn(t, "host", &v1alpha1.FleetSetting{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name},
		Spec: v1alpha1.FleetSettingSpec{
			Clusters: []string{"m1", "m2"},
			Template: v1alpha1.SettingTemplate{Labels: labels, Data: data},
		},
	})
	both := map[string]v1alpha1.SyncState{"m1": v1alpha1.SyncStateSynced, "m2": v1alpha1.SyncStateSynced}
	test.Eventually(t, 2*patience, "both members synced", func() bool { return maps.Equal(states(t, key), both) })
	for _, m := range []string{"m1", "m2"} {
		if !hasCopy(t, m, key, data, labels) {
			t.Fatalf("%s: the status says Synced, the copy is %+v", m, copyIn(t, m, key))
		}
	}

	patchIn(t, "m2", &v1alpha1.Setting{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
		map[string]any{"metadata": map[string]any{"labels": map[string]string{"tier": "tampered"}}})
	test.Eventually(t, patience, "label put back by the patroller", func() bool { return hasCopy(t, "m2", key, data, labels) })
	if !strings.Contains(output(), `"msg":"patrol found drift"`) {
		t.Error(`no "patrol found drift" in the program's log`)
	}

	if err := os.Remove(filepath.Join(clusters, "m2.kubeconfig")); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, patience, "m2 out of the status", func() bool {
		return maps.Equal(states(t, key), map[string]v1alpha1.SyncState{"m1": v1alpha1.SyncStateSynced})
	})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if exitErr != nil {
			t.Fatalf("the program exited with %v after SIGTERM, want status 0", exitErr)
		}
	case <-time.After(patience):
		t.Fatalf("the program still runs %s after SIGTERM", patience)
	}
	if strings.Contains(output(), "DATA RACE") {
		t.Fatal("the program reported a data race")
	}
}
