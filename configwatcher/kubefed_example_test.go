package configwatcher_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
)

// clusters stands in for a server.Server: the three calls that a watcher's
// events map to.
type clusters interface {
	Add(*config.NamedConfig) error
	Update(*config.NamedConfig) error
	Delete(name string) error
}

// loggedClusters is a clusters that only logs; a real program passes its
// server.Server.
type loggedClusters struct{}

func (loggedClusters) Add(nc *config.NamedConfig) error { log.Printf("add %s", nc.Name); return nil }
func (loggedClusters) Update(nc *config.NamedConfig) error {
	log.Printf("update %s", nc.Name)
	return nil
}
func (loggedClusters) Delete(name string) error { log.Printf("delete %s", name); return nil }

// Feed a server every cluster joined to KubeFed. The watcher runs against
// the host cluster (here, the one the usual kubeconfig rules find) and
// reads the KubeFedClusters in kube-federation-system and their Secrets.
func ExampleNewKubeFedWatcher() {
	var srv clusters = loggedClusters{} // server.NewServer(...) in a real program

	kubefedWatcher, err := configwatcher.NewKubeFedWatcher(ctrl.GetConfigOrDie(),
		// Both optional: the defaults are kube-federation-system and
		// "add every cluster, Ready or not".
		configwatcher.WithKubeFedNamespace("kube-federation-system"),
		configwatcher.RequireReady(),
	)
	if err != nil {
		log.Fatalf("new kubefed watcher failed: %v", err)
	}
	// Stop releases the watcher and closes both channels.
	defer kubefedWatcher.Stop()

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case event := <-kubefedWatcher.Events():
			switch event.Type {
			case configwatcher.Added:
				err = srv.Add(event.Config)
			case configwatcher.Updated:
				err = srv.Update(event.Config)
			case configwatcher.Deleted:
				// Only the name: the Secret may be gone already.
				err = srv.Delete(event.Config.Name)
			}
			if err != nil {
				log.Printf("%s %s: %v", event.Type, event.Config.Name, err)
			}
		case err := <-kubefedWatcher.Errors():
			// A missing Secret, a KubeFed CRD not (yet) installed, …
			log.Printf("kubefed watcher: %v", err)
		}
	}
}
