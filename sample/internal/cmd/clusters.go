package cmd

import (
	"os"

	"github.com/mccr-dev/mccr/config"
)

// LoadClusters loads every context of the kubeconfig file or directory
// at path (--clusters) with config.LoadConfigsFromConfigFile. Whatever
// could be loaded is kept, the rest logged: one broken file does not take
// the rest of the fleet down. It exits 2 when path is empty, 1 when no
// cluster could be loaded.
func LoadClusters(path string) []*config.NamedConfig {
	if path == "" {
		SetupLog.Error(nil, "--clusters is required")
		os.Exit(2)
	}
	configs, err := config.LoadConfigsFromConfigFile(path)
	if err != nil {
		SetupLog.Error(err, "some member clusters could not be loaded", "path", path)
	}
	if len(configs) == 0 {
		SetupLog.Error(nil, "no member clusters found", "path", path)
		os.Exit(1)
	}
	return configs
}
