// SDK generation for `pulumi package add` / `pulumi package gen-sdk` into a Python project:
// GeneratePackage writes the Python SDK of a package schema with pkg/v3's Python code
// generator (the same code Pulumi's own host uses), and Link records a generated SDK in the
// project's dependencies through the project's toolchain (requirements.txt for pip, `poetry
// add` / `uv add` otherwise); the engine then calls InstallDependencies.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pulumi/pulumi/pkg/v3/codegen/python"
	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

func (h *host) GeneratePackage(
	ctx context.Context, req *pulumirpc.GeneratePackageRequest,
) (*pulumirpc.GeneratePackageResponse, error) {
	loader, err := schema.NewLoaderClient(req.GetLoaderTarget())
	if err != nil {
		return nil, fmt.Errorf("connecting to the engine's schema loader: %w", err)
	}
	defer loader.Close()

	var spec schema.PackageSpec
	if err := json.Unmarshal([]byte(req.GetSchema()), &spec); err != nil {
		return nil, fmt.Errorf("reading the package schema: %w", err)
	}
	pkg, diags, err := schema.BindSpec(spec, loader, schema.ValidationOptions{AllowDanglingReferences: true})
	if err != nil {
		return nil, fmt.Errorf("binding the package schema: %w", err)
	}
	resp := &pulumirpc.GeneratePackageResponse{Diagnostics: plugin.HclDiagnosticsToRPCDiagnostics(diags)}
	if diags.HasErrors() {
		return resp, nil
	}
	files, err := python.GeneratePackage("pulumi-language-python", pkg, req.GetExtraFiles(), loader)
	if err != nil {
		return nil, fmt.Errorf("generating the Python SDK of %s: %w", pkg.Name, err)
	}
	for name, data := range files {
		path := filepath.Join(req.GetDirectory(), name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// sdkPackageName is the Python distribution (and import) name of a generated SDK:
// `pulumi_<name>` (pkg/v3's codegen/python default, for a package without a namespace or a
// `language.python.packageName`).
func sdkPackageName(dep *pulumirpc.PackageDependency) string {
	name := dep.GetName()
	if p := dep.GetParameterization(); p != nil && p.GetName() != "" {
		name = p.GetName()
	}
	return python.PyPack("", name)
}

func (h *host) Link(ctx context.Context, req *pulumirpc.LinkRequest) (*pulumirpc.LinkResponse, error) {
	info := req.GetInfo()
	if info == nil {
		return nil, fmt.Errorf("Link: no program info")
	}
	tc, err := toolchainFor(info)
	if err != nil {
		return nil, err
	}
	packages := map[string]string{}
	var imports []string
	for _, dep := range req.GetPackages() {
		name := sdkPackageName(dep.GetPackage())
		packages[name] = dep.GetPath()
		imports = append(imports, fmt.Sprintf("  import %s as %s", name, python.PyName(dep.GetPackage().GetName())))
	}
	if err := tc.LinkPackages(ctx, packages); err != nil {
		return nil, fmt.Errorf("adding the SDKs to the project's dependencies: %w", err)
	}
	sort.Strings(imports)
	return &pulumirpc.LinkResponse{
		ImportInstructions: "You can then import the SDK in your Python code with:\n\n" +
			strings.Join(imports, "\n") + "\n",
	}, nil
}
