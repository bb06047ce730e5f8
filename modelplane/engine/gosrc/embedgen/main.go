// Command embedgen writes the JSON files the Kubernetes provider's main package embeds, as the
// upstream generate.go does: the schema with its version set, and the terraform mapping, both
// re-marshalled compactly.
//
// Usage: embedgen <upstream cmd dir> <output dir> <version>
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
)

func main() {
	if len(os.Args) != 4 {
		fail(fmt.Errorf("usage: embedgen <upstream cmd dir> <output dir> <version>"))
	}
	src, dst, version := os.Args[1], os.Args[2], os.Args[3]
	var spec schema.PackageSpec
	must(readJSON(filepath.Join(src, "schema.json"), &spec))
	spec.Version = version
	must(writeJSON(filepath.Join(dst, "schema-embed.json"), spec))
	var mapping any
	must(readJSON(filepath.Join(src, "terraform-mapping.json"), &mapping))
	must(writeJSON(filepath.Join(dst, "terraform-mapping-embed.json"), mapping))
}

func readJSON(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, into); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeJSON(path string, value any) error {
	data, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, data, 0o644)
}

func must(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "embedgen:", err)
	os.Exit(1)
}
