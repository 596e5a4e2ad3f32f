package configwatcher_test

import (
	"log"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/configwatcher"
)

// ExampleNewSecretWatcher feeds a fleet from the kubeconfig Secrets that
// multicluster-runtime's kubeconfig provider reads, in the namespace the
// controller runs in. ArgoCDFormat() reads Argo CD's cluster Secrets
// instead.
func ExampleNewSecretWatcher() {
	w, err := configwatcher.NewSecretWatcher(ctrl.GetConfigOrDie(),
		configwatcher.WithSecretNamespace("mccr-system"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	var fleet loggedClusters
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				return
			}
			switch ev.Type {
			case configwatcher.Added:
				_ = fleet.Add(ev.Config)
			case configwatcher.Updated:
				_ = fleet.Update(ev.Config)
			case configwatcher.Deleted:
				_ = fleet.Delete(ev.Config.Name)
			}
		case err, ok := <-w.Errors():
			if !ok {
				return
			}
			// Names the Secret; never quotes its content.
			log.Print(err)
		}
	}
}
