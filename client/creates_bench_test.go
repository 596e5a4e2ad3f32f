package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// createsPerOp is how many Creates one benchmark operation makes, one
// after another.
const createsPerOp = 200

// BenchmarkMemberCreates makes 200 sequential Creates in one cluster: through
// the fan-out client into a member loaded from a kubeconfig file, as a
// watcher loads it, and directly, with a controller-runtime client built
// from that kubeconfig as ctrl.GetConfig would (QPS -1). One operation is
// all 200; the objects are deleted between operations, off the clock.
func BenchmarkMemberCreates(b *testing.B) {
	ncs, err := config.LoadConfigsFromConfigFile(fleet.Cluster("c1").KubeconfigPath)
	if err != nil || len(ncs) != 1 {
		b.Fatalf("loading c1's kubeconfig: %d configs, %v", len(ncs), err)
	}
	nc := config.NewNamedConfig("creates", ncs[0].Config)
	ns := "bench-creates"
	admin := admin(b, "c1")
	if err := admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); crclient.IgnoreAlreadyExists(err) != nil {
		b.Fatal(err)
	}

	srv, err := server.NewServer(fleet.Cluster("host").Config, serverOptions(logr.Discard(), ns))
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Add(nc); err != nil {
		b.Fatal(err)
	}
	stop := test.Background(srv)
	b.Cleanup(func() {
		if err := stop(); err != nil {
			b.Error(err)
		}
	})
	if err := waitReadyErr(srv, time.Minute, nc.Name); err != nil {
		b.Fatal(err)
	}

	directCfg := *ncs[0].Config
	directCfg.QPS = -1 // what ctrl.GetConfig sets on a kubeconfig's config
	direct, err := crclient.New(&directCfg, crclient.Options{})
	if err != nil {
		b.Fatal(err)
	}

	for _, bc := range []struct {
		name string
		c    crclient.Client
	}{{"direct", direct}, {"fanout", srv.GetClient()}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := known.WithCluster(context.Background(), nc.Name)
			b.ReportAllocs()
			for b.Loop() {
				for i := range createsPerOp {
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%03d", bc.name, i), Namespace: ns}}
					if err := bc.c.Create(ctx, cm); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if err := admin.DeleteAllOf(context.Background(), &corev1.ConfigMap{}, crclient.InNamespace(ns)); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
