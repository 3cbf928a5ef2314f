// The local environment's image registry: distribution pinned by go.mod, with only what
// tests/env/up's registry.yml uses (filesystem storage, no auth, no proxy), as upstream's
// cmd/registry wires it. Upstream's main also links the Azure, GCS and S3 drivers and their
// SDKs, which made most of its build time for nothing the local registry uses.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	// Cobra prints a failed command's error itself; only the exit status is left to set.
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
