package configwatcher_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// optionWatchers are the watchers' constructors, each with its required
// arguments and a %s for the option, by the name of its option interface.
var optionWatchers = map[string]string{
	"FileOption":           "configwatcher.NewFileWatcher(dir, %s)",
	"SecretOption":         "configwatcher.NewSecretWatcher(host, %s)",
	"ClusterAPIOption":     "configwatcher.NewClusterAPIWatcher(host, %s)",
	"ClusterProfileOption": "configwatcher.NewClusterProfileWatcher(host, configwatcher.WithAccessProvidersFile(dir), %s)",
	"KubeFedOption":        "configwatcher.NewKubeFedWatcher(host, %s)",
}

// everyWatcher is the option interface of every watcher.
var everyWatcher = []string{"FileOption", "SecretOption", "ClusterAPIOption", "ClusterProfileOption", "KubeFedOption"}

// optionTakers lists, for options that more than one watcher might be
// thought to take, the option interfaces of the watchers that do take
// them; every other watcher must refuse them at compile time. "log" is a
// WithLogger value given to several watchers.
var optionTakers = map[string][]string{
	"configwatcher.WithLogger(l)":             everyWatcher,
	"log":                                     everyWatcher,
	"configwatcher.AllowAuthPlugins()":        {"FileOption", "SecretOption", "ClusterAPIOption"},
	"configwatcher.WithDebounce(time.Second)": {"FileOption"},
	"configwatcher.WithLoadOptions(config.AllowAuthPlugins())":            {"FileOption"},
	"configwatcher.AllowFileReferences(\"/etc/trusted\")":                 {"FileOption"},
	"configwatcher.FileOptionFunc(func(o *configwatcher.FileOptions) {})": {"FileOption"},
	"configwatcher.WithKubeFedLogger(l)":                                  {"KubeFedOption"},
	"configwatcher.ArgoCDFormat()":                                        {"SecretOption"},
}

// optionCheckSource is a package of this module calling the watchers'
// constructors: one call per line, at the line recorded for it.
const optionCheckSource = `package optioncheck

import (
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
)

var _, _ = time.Second, config.AllowAuthPlugins

func calls(host *rest.Config, dir string, l logr.Logger) {
	log := configwatcher.WithLogger(l)
	_ = log
`

// TestWatcherOptionsCheckedByCompiler: an option given to a watcher that
// has no use for it (WithDebounce to NewSecretWatcher, AllowAuthPlugins to
// NewKubeFedWatcher, …) is a type error naming the option and the
// watcher's option interface, and every combination the watchers take
// compiles, alone and together. Both packages are built by the go command
// as a user's code would be.
func TestWatcherOptionsCheckedByCompiler(t *testing.T) {
	var accepted, rejected []string
	var want []string // for each of rejected, the interface it lacks
	for option, takers := range optionTakers {
		for iface, ctor := range optionWatchers {
			call := fmt.Sprintf(ctor, option)
			if slices.Contains(takers, iface) {
				accepted = append(accepted, call)
			} else {
				rejected = append(rejected, call)
				want = append(want, "cannot use "+option+" (|does not implement configwatcher."+iface+" ")
			}
		}
	}
	// An option of one's own written as a func(*FileOptions), which
	// FileOption was, needs FileOptionFunc now.
	rejected = append(rejected, "configwatcher.NewFileWatcher(dir, func(o *configwatcher.FileOptions) {})")
	want = append(want, "cannot use func(o *configwatcher.FileOptions) {} (|does not implement configwatcher.FileOption ")
	// Several at once, as slices and as arguments.
	accepted = append(accepted,
		"configwatcher.NewFileWatcher(dir, log, configwatcher.AllowAuthPlugins(), configwatcher.WithDebounce(time.Second), configwatcher.AllowFileReferences(dir))",
		"configwatcher.NewSecretWatcher(host, append([]configwatcher.SecretOption{log, configwatcher.AllowAuthPlugins()}, configwatcher.ArgoCDFormat())...)",
		"configwatcher.NewClusterAPIWatcher(host, []configwatcher.ClusterAPIOption{log, configwatcher.AllowAuthPlugins(), configwatcher.RequireAvailable()}...)",
		"configwatcher.NewClusterProfileWatcher(host, log, configwatcher.WithAccessProvidersFile(dir), configwatcher.PublishUnhealthy())",
		"configwatcher.NewKubeFedWatcher(host, []configwatcher.KubeFedOption{log, configwatcher.RequireReady()}...)",
		"configwatcher.NewFileWatcher(dir, []configwatcher.FileOption{log, configwatcher.AllowAuthPlugins()}...)",
	)
	slices.Sort(accepted)

	if out, err := buildCalls(t, "_optionsok", accepted); err != nil {
		t.Fatalf("the combinations the watchers take do not compile: %v\n%s", err, out)
	}

	// Sorted together, so that the line of each call is known.
	order := make([]int, len(rejected))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(rejected[a], rejected[b]) })
	calls := make([]string, len(order))
	for i, j := range order {
		calls[i] = rejected[j]
	}
	out, err := buildCalls(t, "_optionswrong", calls)
	if err == nil {
		t.Fatalf("options given to watchers that do not take them compile:\n%s", strings.Join(calls, "\n"))
	}
	firstLine := strings.Count(optionCheckSource, "\n") + 1
	errAt := regexp.MustCompile(`(?m)^[^\s:]*optioncheck\.go:(\d+):\d+: (.*)$`)
	byLine := map[int]string{}
	for _, m := range errAt.FindAllStringSubmatch(string(out), -1) {
		line, _ := strconv.Atoi(m[1])
		if line < firstLine || line >= firstLine+len(calls) {
			t.Errorf("an error outside the calls: line %d: %s", line, m[2])
			continue
		}
		byLine[line] = m[2]
	}
	for i, j := range order {
		msg, ok := byLine[firstLine+i]
		if !ok {
			t.Errorf("compiles, but the watcher does not take the option: %s", calls[i])
			continue
		}
		for part := range strings.SplitSeq(want[j], "|") {
			if !strings.Contains(msg, part) {
				t.Errorf("%s: the error does not say %q: %s", calls[i], part, msg)
			}
		}
	}
	if len(byLine) == 0 {
		t.Errorf("no type error found in the output of the go command:\n%s", out)
	}
	t.Logf("%d combinations compile, %d are type errors", len(accepted), len(calls))
}

// buildCalls builds, with the go command, a package inside this module
// (so that its go.mod resolves the imports) in a directory that the go
// command's ./... patterns pass over, whose function makes each call.
// Every error is reported (-gcflags=-e), not only the first ten.
func buildCalls(t *testing.T, prefix string, calls []string) ([]byte, error) {
	t.Helper()
	dir, err := os.MkdirTemp(".", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var src strings.Builder
	src.WriteString(optionCheckSource)
	for _, call := range calls {
		src.WriteString("\t_, _ = " + call + "\n")
	}
	src.WriteString("}\n")
	if err := os.WriteFile(filepath.Join(dir, "optioncheck.go"), []byte(src.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return exec.Command("go", "build", "-gcflags=-e", "./"+filepath.Base(dir)).CombinedOutput()
}
