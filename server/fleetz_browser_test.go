package server_test

import (
	"bytes"
	"context"
	"html"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// chromium returns the headless browser the fleet page is tested in:
// $CHROMIUM, else Debian's /usr/bin/chromium. A missing browser fails the
// test: the page's promise is what a person sees.
func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(path); err != nil {
		t.Fatalf("no headless Chromium at %s (%v): run `make browser` to install Debian's chromium, or set $CHROMIUM to a Chromium binary", path, err)
	}
	return path
}

// browse loads url in a fresh headless Chromium and returns the DOM as the
// browser built it, after its scripts (if any had run); with screenshot
// set, it also saves the window as a PNG there.
func browse(t *testing.T, bin, url, screenshot string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--no-proxy-server", "--user-data-dir=" + t.TempDir(),
	}
	if screenshot != "" {
		args = append(args, "--screenshot="+screenshot, "--window-size=1280,900")
	} else {
		args = append(args, "--dump-dom")
	}
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", url, err, stderr.String())
	}
	return stdout.String()
}

var (
	rowRE   = regexp.MustCompile(`(?s)<tr class="cluster" data-phase="([^"]*)">(.*?)</tr>`)
	nameRE  = regexp.MustCompile(`(?s)<td class="name">(.*?)</td>`)
	errRE   = regexp.MustCompile(`(?s)<td class="err">(.*?)</td>`)
	reachRE = regexp.MustCompile(`(?s)<td class="reach">(.*?)</td>`)
	titleRE = regexp.MustCompile(`(?s)<title>(.*?)</title>`)
)

// seen is a page as a person reads it: the title, and per row the
// cluster's name, phase and error, as text.
type seen struct {
	title string
	rows  map[string]seenRow
}

type seenRow struct{ phase, reach, err string }

func read(t *testing.T, dom string) seen {
	t.Helper()
	s := seen{rows: map[string]seenRow{}}
	if m := titleRE.FindStringSubmatch(dom); m != nil {
		s.title = html.UnescapeString(m[1])
	}
	for _, r := range rowRE.FindAllStringSubmatch(dom, -1) {
		name := nameRE.FindStringSubmatch(r[2])
		if name == nil {
			t.Fatalf("a row without a name cell: %s", r[0])
		}
		var e string
		if m := errRE.FindStringSubmatch(r[2]); m != nil {
			e = html.UnescapeString(m[1])
		}
		var reach string
		if m := reachRE.FindStringSubmatch(r[2]); m != nil {
			reach = html.UnescapeString(m[1])
		}
		s.rows[html.UnescapeString(name[1])] = seenRow{phase: r[1], reach: reach, err: e}
	}
	return s
}

// TestFleetPageInBrowser opens /fleetz in headless Chromium over a fleet of
// three real API servers: one member reached with a token the API server
// does not know (Failed, with its error), two with names that try to be
// markup or carry quotes and non-ASCII. It checks what a person sees —
// every row, the error, the names as text, the title — then mends the
// failing member and deletes another and checks the reloaded page shows
// both changes. The screenshot is kept ($MCCR_ARTIFACTS, else the test's
// temporary directory) and its path logged.
func TestFleetPageInBrowser(t *testing.T) {
	bin := chromium(t)
	ns := testNamespace(t)
	addr := test.FreeAddress(t)
	r := startServer(t, ns, func(o *ctrl.Options) {
		o.Metrics = metricsserver.Options{BindAddress: addr}
	}, func(o *server.Options) {
		o.FleetPage = true
		// The failing member's retry (phase Starting) must not fall
		// between the wait for Failed and the page loads that expect it.
		o.Backoff = wait.Backoff{Duration: time.Hour, Cap: time.Hour}
	})
	srv := r.srv

	const (
		hostile = `<script>document.title="owned"</script><i id="injected">x</i>`
		quoted  = `quo"te's & ünïcødé ☸ 東京`
		broken  = "bad-credentials"
	)
	for name, from := range map[string]string{hostile: "m1", quoted: "m2"} {
		nc := config.NewNamedConfig(name, fleet.Cluster(from).Config)
		if err := srv.Add(nc); err != nil {
			t.Fatalf("%q: %v", name, err)
		}
	}
	good := fleet.Cluster("m3").Config
	bad := rest.AnonymousClientConfig(good)
	bad.BearerToken = "not-a-token-this-api-server-knows"
	if err := srv.Add(config.NewNamedConfig(broken, bad)); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, "m1", ns, "seen")
	waitReady(t, srv, hostile, quoted)
	var failed server.ClusterStatus
	test.Eventually(t, 60*time.Second, broken+" Failed with an error", func() bool {
		st, err := srv.Status(broken)
		failed = st
		return err == nil && st.Phase == server.PhaseFailed && st.LastError != nil
	})
	test.Eventually(t, 30*time.Second, "a reconcile counted", func() bool { return r.rec.total(hostile) > 0 })
	test.Eventually(t, 30*time.Second, hostile+" probed reachable", func() bool {
		st, err := srv.Status(hostile)
		return err == nil && st.Reachable
	})

	// The page names a controller once a reconcile of it has returned
	// (the metrics count it then); the recorder above counts it as it
	// begins.
	url := "http://" + addr + "/fleetz"
	test.Eventually(t, 30*time.Second, "/fleetz answers, naming the member controller", func() bool {
		res, err := http.Get(url)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		return err == nil && res.StatusCode == http.StatusOK && strings.Contains(string(body), "configmaps-"+ns)
	})

	dom := browse(t, bin, url, "")
	page := read(t, dom)
	if page.title != "mccr fleet" {
		t.Errorf("title %q, want %q (a script ran?)", page.title, "mccr fleet")
	}
	if strings.Contains(dom, `<i id="injected"`) || strings.Contains(dom, "<script") {
		t.Errorf("a name became markup:\n%s", dom)
	}
	want := map[string]string{hostile: "Ready", quoted: "Ready", broken: "Failed"}
	for name, phase := range want {
		if got, ok := page.rows[name]; !ok || got.phase != phase {
			t.Errorf("row %q: %+v (present %v), want phase %s; rows: %v", name, got, ok, phase, page.rows)
		}
	}
	if reach := page.rows[hostile].reach; !strings.HasPrefix(reach, "yes") {
		t.Errorf("%q is Ready but shows reachable %q", hostile, reach)
	}
	if len(page.rows) != len(want) {
		t.Errorf("%d rows, want %d: %v", len(page.rows), len(want), page.rows)
	}
	if e := page.rows[broken].err; e != failed.LastError.Error() || !strings.Contains(e, "rejected the credentials") {
		t.Errorf("%s shows error %q; Status says %q", broken, e, failed.LastError)
	}
	if !strings.Contains(dom, "configmaps-"+ns) {
		t.Errorf("the page does not name the member controller configmaps-%s", ns)
	}

	// The filter, as a link a person follows.
	only := read(t, browse(t, bin, url+"?phase=Failed", ""))
	if len(only.rows) != 1 || only.rows[broken].phase != "Failed" {
		t.Errorf("?phase=Failed shows %v", only.rows)
	}

	dir := os.Getenv("MCCR_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "fleetz.png")
	browse(t, bin, url, shot)
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("no PNG screenshot at %s: %v", shot, err)
	}
	t.Logf("screenshot of /fleetz: %s (%d bytes)", shot, len(png))

	// Mend one member, delete another: the next load shows both.
	if err := srv.Update(config.NewNamedConfig(broken, good)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Delete(quoted); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, broken)
	after := read(t, browse(t, bin, url, ""))
	if got := after.rows[broken]; got.phase != "Ready" || got.err != "" {
		t.Errorf("after the fix, %s shows %+v, want Ready without an error", broken, got)
	}
	if _, ok := after.rows[quoted]; ok || len(after.rows) != 2 {
		t.Errorf("after deleting %q, rows: %v", quoted, after.rows)
	}
}

// TestFleetPageOffByDefault: without Options.FleetPage the metrics server
// serves no fleet page.
func TestFleetPageOffByDefault(t *testing.T) {
	ns := testNamespace(t)
	addr := test.FreeAddress(t)
	startServer(t, ns, func(o *ctrl.Options) { o.Metrics = metricsserver.Options{BindAddress: addr} })
	test.Eventually(t, 30*time.Second, "/metrics answers", func() bool {
		res, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		_ = res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	for _, path := range []string{"/fleetz", "/fleetz.json"} {
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %s, want 404 when FleetPage is off", path, res.Status)
		}
	}
}
