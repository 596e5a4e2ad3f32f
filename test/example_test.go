package test_test

import (
	"fmt"
	"os"

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
