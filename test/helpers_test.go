package test_test

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/mccr-dev/mccr/test"
)

var kubefedClusterListGVK = schema.GroupVersionKind{Group: "core.kubefed.io", Version: "v1beta1", Kind: "KubeFedClusterList"}

// helperFleetEnv makes this test binary, run by
// TestKilledTestBinaryLeavesNoAPIServer, start a fleet and wait to be
// killed instead of running tests.
const helperFleetEnv = "MCCR_TEST_HELPER_FLEET"

// helperFleet is the killed binary's whole life.
func helperFleet() {
	f, err := test.Start(test.Options{}, "doomed")
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("READY", f.Dir)
	select {} // until SIGKILL
}
