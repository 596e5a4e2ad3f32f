package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestFleetPageOfALaterServer runs two Servers one after the other in one
// process, as a program that makes a new Server after its Start returned
// does: both have a member of the same name, each one of its own. Once the
// first has stopped no series of its members is left in the registry, and
// the second's /fleetz.json and /metrics show only its own members, with
// only its own reconciles, and controller totals that add up its rows.
func TestFleetPageOfALaterServer(t *testing.T) {
	ns := testNamespace(t)
	shared, firstOnly, secondOnly := "shared-"+ns, "first-"+ns, "second-"+ns
	createConfigMap(t, "m1", ns, "a")
	createConfigMap(t, "m2", ns, "a")
	createConfigMap(t, "m3", ns, "a")

	addr1 := test.FreeAddress(t)
	first := startPaged(t, ns, addr1)
	addRenamed(t, first.srv, map[string]string{shared: "m1", firstOnly: "m2"})
	test.Eventually(t, 60*time.Second, "the first Server reconciled in both members", func() bool {
		return first.rec.count(shared, "a") > 0 && first.rec.count(firstOnly, "a") > 0
	})
	test.Eventually(t, 30*time.Second, "the first Server's page counts its reconciles", func() bool {
		p, err := getFleetPage(addr1)
		return err == nil && rowReconciles(p, shared) > 0 && rowReconciles(p, firstOnly) > 0
	})
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{shared, firstOnly} {
		if n := countSeries(t, "mccr_", func(c string) bool { return c == name }); n != 0 {
			t.Errorf("the first Server stopped, %d series of its member %q remain", n, name)
		}
	}

	addr2 := test.FreeAddress(t)
	second := startPaged(t, ns, addr2)
	addRenamed(t, second.srv, map[string]string{shared: "m1", secondOnly: "m3"})
	want := []string{secondOnly, shared} // by name
	// The last reading, to explain a timeout.
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the second Server's page, last read: %s", last)
		}
	})
	test.Eventually(t, 60*time.Second, "the second Server's page shows its members with its own reconciles", func() bool {
		p, err := getFleetPage(addr2)
		if err != nil {
			last = err.Error()
			return false
		}
		var rows []string
		var sum float64
		for _, c := range p.Clusters {
			rows = append(rows, c.Name)
			sum += rowReconciles(p, c.Name)
		}
		var totals float64
		for _, c := range p.Controllers {
			totals += c.Reconciles
		}
		last = fmt.Sprintf("rows %v; %s reconciles %v (its reconciler counted %d), %s %v (%d); totals %v, rows' sum %v",
			rows, shared, rowReconciles(p, shared), second.rec.total(shared),
			secondOnly, rowReconciles(p, secondOnly), second.rec.total(secondOnly), totals, sum)
		return slices.Equal(rows, want) && p.Total == len(want) &&
			second.rec.total(shared) > 0 && rowReconciles(p, shared) == float64(second.rec.total(shared)) &&
			second.rec.total(secondOnly) > 0 && rowReconciles(p, secondOnly) == float64(second.rec.total(secondOnly)) &&
			totals == sum
	})
	if first.rec.total(shared) == 0 {
		t.Fatalf("the first Server never reconciled in %s: the check above proves nothing", shared)
	}

	res, err := http.Get("http://" + addr2 + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if bad := fmt.Sprintf("cluster=%q", firstOnly); strings.Contains(string(body), bad) {
		t.Errorf("the second Server's /metrics has series with %s, a member of the first one only", bad)
	}
	// The reconciler counts a reconcile as it begins, the metric once it
	// returned: they agree once none is under way.
	test.Eventually(t, 30*time.Second, "mccr_reconcile_total of "+shared+" to be what the second Server's reconciler counted", func() bool {
		return reconcileTotal(t, shared) == float64(second.rec.total(shared))
	})
}

// startPaged starts a Server whose metrics server, at addr, serves the
// fleet page.
func startPaged(t *testing.T, ns, addr string) *running {
	t.Helper()
	return startServer(t, ns, func(o *ctrl.Options) {
		o.Metrics = metricsserver.Options{BindAddress: addr}
	}, func(o *server.Options) { o.FleetPage = true })
}

// addRenamed adds the fleet's clusters (values) under other names (keys).
func addRenamed(t *testing.T, srv *server.Server, named map[string]string) {
	t.Helper()
	for name, cluster := range named {
		if err := srv.Add(config.NewNamedConfig(name, fleet.Cluster(cluster).Config)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// fleetzJSON is what these tests read of /fleetz.json.
type fleetzJSON struct {
	Total    int
	Clusters []struct {
		Name        string
		Controllers []struct {
			Name       string
			Reconciles float64
		}
	}
	Controllers []struct {
		Name       string
		Reconciles float64
	}
}

func getFleetPage(addr string) (*fleetzJSON, error) {
	res, err := http.Get("http://" + addr + "/fleetz.json")
	if err != nil {
		return nil, err
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/fleetz.json: %s", res.Status)
	}
	var p fleetzJSON
	return &p, json.NewDecoder(res.Body).Decode(&p)
}

// rowReconciles adds up the reconciles of a cluster's row over its
// controllers.
func rowReconciles(p *fleetzJSON, cluster string) float64 {
	var n float64
	for _, c := range p.Clusters {
		if c.Name == cluster {
			for _, ctl := range c.Controllers {
				n += ctl.Reconciles
			}
		}
	}
	return n
}

// reconcileTotal adds up mccr_reconcile_total of a cluster over its
// controllers and results.
func reconcileTotal(t *testing.T, cluster string) float64 {
	t.Helper()
	var n float64
	for _, m := range family(t, "mccr_reconcile_total") {
		if label(m, "cluster") == cluster {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}
