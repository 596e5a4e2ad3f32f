package configwatcher_test

import (
	"log"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/configwatcher"
	mccrserver "github.com/mccr-dev/mccr/server"
)

// One WithLogger value serves every watcher, and AllowAuthPlugins every
// watcher that reads kubeconfig users written by others. An option a
// watcher has no use for does not compile: WithDebounce given to
// NewSecretWatcher is a type error, FileOption not being a SecretOption.
func ExampleWithLogger() {
	host := ctrl.GetConfigOrDie()
	srv, err := mccrserver.NewServer(host, ctrl.Options{})
	if err != nil {
		log.Fatal(err)
	}
	logger := configwatcher.WithLogger(ctrl.Log.WithName("watchers"))

	files, err := configwatcher.NewFileWatcher("/etc/mccr/clusters", logger,
		configwatcher.AllowAuthPlugins(), configwatcher.WithDebounce(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	// The Server stops each watcher it watches when Start returns.
	srv.Watch(files)

	secrets, err := configwatcher.NewSecretWatcher(host, logger,
		configwatcher.AllowAuthPlugins(), configwatcher.ArgoCDFormat())
	if err != nil {
		log.Fatal(err)
	}
	srv.Watch(secrets)

	kubefed, err := configwatcher.NewKubeFedWatcher(host, logger)
	if err != nil {
		log.Fatal(err)
	}
	srv.Watch(kubefed)

	if err := srv.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Fatal(err)
	}
}

// An option of one's own for the FileWatcher: FileOption was a
// func(*FileOptions), and such a func is now a FileOption through
// FileOptionFunc.
func ExampleFileOptionFunc() {
	halfSecond := configwatcher.FileOptionFunc(func(o *configwatcher.FileOptions) {
		o.Debounce = 500 * time.Millisecond
	})
	w, err := configwatcher.NewFileWatcher("/etc/mccr/clusters", halfSecond)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
}
