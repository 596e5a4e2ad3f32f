package test_test

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// Start runs a fleet from a plain program (this is how `make demo` gets its
// clusters); in a test, NewFleet also stops it when the test ends.
func ExampleStart() {
	fleet, err := test.Start(test.Options{}, "east", "west")
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // names `make kubebins` when the binaries are missing
		os.Exit(1)
	}
	defer func() {
		if err := fleet.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	for _, c := range fleet.Clusters {
		fmt.Println(c.Name, "at", c.Config.Host, "kubeconfig", c.KubeconfigPath)
	}
}

// A FaultProxy in front of a cluster's API server breaks the link on
// demand: here, a partition that makes a call hang until its timeout, then
// heals.
func ExampleFaultProxy() {
	fleet, err := test.Start(test.Options{}, "east")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer func() { _ = fleet.Stop() }()
	p, err := test.StartFaultProxy(fleet.Cluster("east").Config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer func() { _ = p.Close() }()
	// Anything built on p.Config() (a Server member, a client) goes
	// through the proxy.
	cs := kubernetes.NewForConfigOrDie(p.Config())
	get := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	}
	fmt.Println("passing:", get())
	_ = p.Freeze()
	fmt.Println("frozen:", get() != nil) // hung until the 2s timeout
	_ = p.Pass()
	fmt.Println("healed:", get())
	fmt.Printf("%+v\n", p.Stats())
}

// An OwnershipRecorder checks that replicas sharing a fleet never run a
// cluster at the same time, nor leave one without an owner for long. The
// replicas of a sharded deployment split the clusters between them; these
// two do not, so Check reports both clusters as overlaps.
func ExampleOwnershipRecorder() {
	fleet, err := test.Start(test.Options{}, "host", "east", "west")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer func() { _ = fleet.Stop() }()
	rec := &test.OwnershipRecorder{}
	replicas := []string{"replica-1", "replica-2"}
	stops := make([]func() error, 0, len(replicas))
	defer func() {
		for _, stop := range stops {
			_ = stop()
		}
	}()
	for _, replica := range replicas {
		srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
			Metrics: metricsserver.Options{BindAddress: "0"},
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return
		}
		srv.AddReconcilerSetup(rec.Setup(replica)) // next to your own setups
		for _, name := range []string{"east", "west"} {
			if err := srv.Add(fleet.Cluster(name).Named); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return
			}
		}
		stops = append(stops, test.Background(srv))
	}
	// Wait until both replicas run both clusters (a test waits with
	// test.Eventually).
	for len(rec.Owners("east")) < 2 || len(rec.Owners("west")) < 2 {
		time.Sleep(100 * time.Millisecond)
	}
	from := time.Now()
	// The attack: here, replica-1 stops (or its API servers are put behind
	// FaultProxies and frozen).
	_ = stops[0]()
	rep := rec.Report(from, time.Now(), "east", "west")
	if err := rep.Check(15 * time.Second); err != nil {
		fmt.Println(err) // names each cluster, interval and owner at fault
	}
}
