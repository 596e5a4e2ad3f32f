package configwatcher_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
)

// fleet stands in for a server.Server: the three calls a watcher's events
// map to.
type fleet struct{}

func (fleet) Add(c *config.NamedConfig) error {
	fmt.Println("add", c.Name, c.Config.Host)
	return nil
}

func (fleet) Update(c *config.NamedConfig) error {
	fmt.Println("update", c.Name, c.Config.Host)
	return nil
}

func (fleet) Delete(name string) error {
	fmt.Println("delete", name)
	return nil
}

func writeKubeconfig(path, context, server string) {
	// The way editors save: a hidden temporary file renamed over the file.
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	_ = os.WriteFile(tmp, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "`+server+`"}
users:
- name: u
  user: {token: not-a-real-token}
contexts:
- name: `+context+`
  context: {cluster: c, user: u}
`), 0o600)
	_ = os.Rename(tmp, path)
}

// The hand-written event loop: apply every event to the fleet, log errors.
// Server.Watch does the same for a Server.
func ExampleNewFileWatcher() {
	dir, _ := os.MkdirTemp("", "fleet")
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "prod")
	writeKubeconfig(kubeconfig, "prod", "https://10.0.0.1:6443")

	watcher, err := configwatcher.NewFileWatcher(dir)
	if err != nil {
		fmt.Println("new file watcher failed:", err)
		return
	}
	// Stop releases the watcher and closes both channels.
	defer watcher.Stop()

	srv := fleet{}
	for handled := 0; handled < 3; {
		select {
		case event, ok := <-watcher.Events():
			if !ok {
				return
			}
			switch event.Type {
			case configwatcher.Added:
				_ = srv.Add(event.Config)
			case configwatcher.Updated:
				_ = srv.Update(event.Config)
			case configwatcher.Deleted:
				_ = srv.Delete(event.Config.Name)
			}
			handled++

			// Meanwhile, someone moves prod to a new endpoint, then
			// removes it.
			switch handled {
			case 1:
				writeKubeconfig(kubeconfig, "prod", "https://10.0.0.2:6443")
			case 2:
				_ = os.Remove(kubeconfig)
			}
		case err, ok := <-watcher.Errors():
			if !ok {
				return
			}
			fmt.Println("file watcher:", err)
		}
	}
	// Output:
	// add prod https://10.0.0.1:6443
	// update prod https://10.0.0.2:6443
	// delete prod
}
