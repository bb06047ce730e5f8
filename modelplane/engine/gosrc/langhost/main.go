// Command pulumi-language-python is the Python language host that modelplane's engine
// bootstrap builds when the Go module proxy does not serve Pulumi's own host module
// (github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3 has no tags, so it is only
// reachable by pseudo-version, which a restricted proxy may refuse).
//
// It is a small gRPC LanguageRuntime server built on the pulumi sdk/v3 module of the same
// release as the installed `pulumi` Python package: the Python toolchain handling (virtualenv,
// PULUMI_PYTHON_CMD, pip/poetry/uv) comes from sdk/v3's python/toolchain package, and programs
// run through `pulumi-language-python-exec`, the shim from the same sdk/v3 module, which must
// sit next to this executable.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/version"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/pulumi/pulumi/sdk/v3/python/toolchain"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// exitAfterUserMessage is the exit code the exec shim uses after it has shown the user an
// actionable error: the engine should then stop without adding its own error.
const exitAfterUserMessage = 32

func main() {
	flags, err := parseFlags(os.Args[1:])
	if err != nil {
		fail(err)
	}
	executor := flags.executor
	if executor == "" {
		if executor, err = findExecutor(); err != nil {
			fail(err)
		}
	}
	h := &host{executor: executor, tracing: flags.tracing, engineAddress: flags.engineAddress}
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, h)
			return nil
		},
	})
	if err != nil {
		fail(fmt.Errorf("could not start the language host RPC server: %w", err))
	}
	// The engine reads the port from the first line of stdout.
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		fail(fmt.Errorf("language host RPC stopped serving: %w", err))
	}
}

type hostFlags struct {
	engineAddress string
	tracing       string
	executor      string
}

// parseFlags reads the arguments the engine passes to a language plugin: optional flags
// (-v=N, --logtostderr, --tracing URL, ...) and the engine address as the last positional one.
// Unknown flags are ignored so that a newer engine does not break this host.
func parseFlags(args []string) (hostFlags, error) {
	var out hostFlags
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if !strings.HasPrefix(arg, "-") {
			out.engineAddress = arg
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if name != "tracing" && name != "use-executor" {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return out, fmt.Errorf("flag -%s needs a value", name)
			}
			i++
			value = args[i]
		}
		if name == "tracing" {
			out.tracing = value
		} else {
			out.executor = value
		}
	}
	return out, nil
}

// findExecutor returns pulumi-language-python-exec from the directory of this executable,
// or from PATH.
func findExecutor() (string, error) {
	self, err := os.Executable()
	if err == nil {
		if resolved, rerr := filepath.EvalSymlinks(self); rerr == nil {
			self = resolved
		}
		name := strings.TrimSuffix(filepath.Base(self), filepath.Ext(self)) + "-exec"
		candidate := filepath.Join(filepath.Dir(self), name)
		if _, serr := os.Stat(candidate); serr == nil {
			return candidate, nil
		}
	}
	path, err := exec.LookPath("pulumi-language-python-exec")
	if err != nil {
		return "", errors.New("missing executor pulumi-language-python-exec: " +
			"put it next to pulumi-language-python or on PATH")
	}
	return path, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "pulumi-language-python:", err)
	os.Exit(1)
}

type host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer

	executor string
	tracing  string

	mu            sync.Mutex
	engineAddress string
}

func (h *host) engine() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.engineAddress
}

func (h *host) Handshake(
	_ context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	if req.GetEngineAddress() != "" {
		h.mu.Lock()
		h.engineAddress = req.GetEngineAddress()
		h.mu.Unlock()
	}
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *host) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version.Version}, nil
}

// toolchainFor resolves the Python toolchain from the project's runtime options
// (`runtime: {name: python, options: {toolchain: pip|poetry|uv, virtualenv: DIR}}`).
func toolchainFor(info *pulumirpc.ProgramInfo) (toolchain.Toolchain, error) {
	opts := toolchain.PythonOptions{
		Root:       info.GetRootDirectory(),
		ProgramDir: info.GetProgramDirectory(),
		Toolchain:  toolchain.Auto,
	}
	if opts.ProgramDir == "" {
		opts.ProgramDir = opts.Root
	}
	fields := info.GetOptions().GetFields()
	if v, ok := fields["virtualenv"]; ok {
		opts.Virtualenv = v.GetStringValue()
		opts.Toolchain = toolchain.Pip
	}
	if v, ok := fields["toolchain"]; ok {
		switch name := v.GetStringValue(); name {
		case "pip":
			opts.Toolchain = toolchain.Pip
		case "poetry":
			opts.Toolchain = toolchain.Poetry
		case "uv":
			opts.Toolchain = toolchain.Uv
		default:
			return nil, fmt.Errorf("unsupported python toolchain %q (use pip, poetry or uv)", name)
		}
	}
	return toolchain.ResolveToolchain(opts)
}

// listPluginsScript prints, as JSON, the pulumi-plugin.json of every importable top-level
// package that declares a resource plugin. It looks only where a package keeps that file (its
// own directory on sys.path), not through every installed distribution's file list: the
// engine asks at the start of every run, and reading each distribution's RECORD took about a
// quarter of a second with the cloud SDKs installed (bench/engine_phases.py).
const listPluginsScript = `
import json, os, sys
found, seen = [], set()
for entry in sys.path:
    try:
        names = sorted(os.listdir(entry or "."))
    except OSError:
        continue
    for name in names:
        path = os.path.join(entry or ".", name, "pulumi-plugin.json")
        if name in seen or not os.path.isfile(path):
            continue
        seen.add(name)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except Exception:
            continue
        if isinstance(data, dict) and data.get("resource"):
            if not data.get("version"):
                import importlib.metadata as md
                dists = md.packages_distributions().get(name) or []
                if dists:
                    data["version"] = md.version(dists[0])
            found.append(data)
json.dump(found, sys.stdout)
`

// aboutScript prints the interpreter's path and version: what About reports, from one process
// (the toolchain's About starts three, one of them `pip --version`).
const aboutScript = `import sys; print(sys.executable); print("%d.%d.%d" % sys.version_info[:3])`

type pluginFile struct {
	Name             string `json:"name"`
	Version          string `json:"version"`
	Server           string `json:"server"`
	Parameterization *struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		Value   string `json:"value"`
	} `json:"parameterization"`
}

func installedPlugins(ctx context.Context, info *pulumirpc.ProgramInfo) ([]pluginFile, error) {
	tc, err := toolchainFor(info)
	if err != nil {
		return nil, err
	}
	cmd, err := tc.Command(ctx, "-c", listPluginsScript)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the Python packages' Pulumi plugins: %w", err)
	}
	var plugins []pluginFile
	if err := json.Unmarshal(out, &plugins); err != nil {
		return nil, fmt.Errorf("reading the Python packages' Pulumi plugins: %w", err)
	}
	var named []pluginFile
	for _, p := range plugins {
		if p.Name != "" {
			named = append(named, p)
		}
	}
	return named, nil
}

func semverOf(v string) string {
	if v == "" || strings.HasPrefix(v, "v") {
		return v
	}
	return "v" + v
}

func (h *host) GetRequiredPackages(
	ctx context.Context, req *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	plugins, err := installedPlugins(ctx, req.GetInfo())
	if err != nil {
		return nil, err
	}
	resp := &pulumirpc.GetRequiredPackagesResponse{}
	for _, p := range plugins {
		dep := &pulumirpc.PackageDependency{
			Name: p.Name, Kind: "resource", Version: semverOf(p.Version), Server: p.Server,
		}
		if param := p.Parameterization; param != nil {
			value, derr := base64.StdEncoding.DecodeString(param.Value)
			if derr != nil {
				return nil, fmt.Errorf("plugin %s: bad parameterization value: %w", p.Name, derr)
			}
			dep.Parameterization = &pulumirpc.PackageParameterization{
				Name: param.Name, Version: semverOf(param.Version), Value: value,
			}
		}
		resp.Packages = append(resp.Packages, dep)
	}
	return resp, nil
}

func (h *host) GetRequiredPlugins(
	ctx context.Context, req *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	plugins, err := installedPlugins(ctx, req.GetInfo())
	if err != nil {
		return nil, err
	}
	resp := &pulumirpc.GetRequiredPluginsResponse{}
	for _, p := range plugins {
		if p.Parameterization != nil {
			continue
		}
		resp.Plugins = append(resp.Plugins, &pulumirpc.PluginDependency{
			Name: p.Name, Kind: "resource", Version: semverOf(p.Version), Server: p.Server,
		})
	}
	return resp, nil
}

func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	info := req.GetInfo()
	tc, err := toolchainFor(info)
	if err != nil {
		return nil, err
	}
	args := []string{"-u", h.executor,
		"--monitor", req.GetMonitorAddress(),
		"--engine", h.engine(),
		"--project", req.GetProject(),
		"--stack", req.GetStack(),
		"--pwd", req.GetPwd(),
		"--dry_run", strconv.FormatBool(req.GetDryRun()),
		"--parallel", strconv.Itoa(int(req.GetParallel())),
	}
	if req.GetOrganization() != "" {
		args = append(args, "--organization", req.GetOrganization())
	}
	if info.GetRootDirectory() != "" {
		args = append(args, "--root_directory", info.GetRootDirectory())
	}
	if h.tracing != "" {
		args = append(args, "--tracing", h.tracing)
	}
	args = append(args, programPath(req))
	args = append(args, req.GetArgs()...)

	cmd, err := tc.Command(ctx, args...)
	if err != nil {
		return nil, err
	}
	// The shim reads both variables as JSON objects/arrays: never send `null`.
	configMap := req.GetConfig()
	if configMap == nil {
		configMap = map[string]string{}
	}
	config, err := json.Marshal(configMap)
	if err != nil {
		return nil, fmt.Errorf("serialising the configuration: %w", err)
	}
	secretKeys, err := json.Marshal(append([]string{}, req.GetConfigSecretKeys()...))
	if err != nil {
		return nil, fmt.Errorf("serialising the secret configuration keys: %w", err)
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env,
		"PULUMI_CONFIG="+string(config),
		"PULUMI_CONFIG_SECRET_KEYS="+string(secretKeys),
	)
	cmd.Dir = req.GetPwd()
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr

	err = cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return &pulumirpc.RunResponse{}, nil
	case errors.As(err, &exitErr) && exitErr.ExitCode() == exitAfterUserMessage:
		return &pulumirpc.RunResponse{Bail: true}, nil
	case errors.As(err, &exitErr):
		return &pulumirpc.RunResponse{
			Error: fmt.Sprintf("Program exited with non-zero exit code: %d", exitErr.ExitCode()),
		}, nil
	default:
		return &pulumirpc.RunResponse{
			Error: fmt.Sprintf("could not run the Python executor: %v", err),
		}, nil
	}
}

// programPath is the file or directory the exec shim runs: the entry point inside the program
// directory, or the deprecated RunRequest.program, or the working directory.
func programPath(req *pulumirpc.RunRequest) string {
	info := req.GetInfo()
	if info != nil && info.GetProgramDirectory() != "" {
		entry := info.GetEntryPoint()
		if entry == "" {
			entry = "."
		}
		return filepath.Join(info.GetProgramDirectory(), entry)
	}
	if req.GetProgram() != "" {
		return req.GetProgram()
	}
	return "."
}

type streamWriter struct {
	send   func(*pulumirpc.InstallDependenciesResponse) error
	stderr bool
}

func (w streamWriter) Write(p []byte) (int, error) {
	data := append([]byte(nil), p...)
	resp := &pulumirpc.InstallDependenciesResponse{Stdout: data}
	if w.stderr {
		resp = &pulumirpc.InstallDependenciesResponse{Stderr: data}
	}
	if err := w.send(resp); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (h *host) InstallDependencies(
	req *pulumirpc.InstallDependenciesRequest,
	server grpc.ServerStreamingServer[pulumirpc.InstallDependenciesResponse],
) error {
	ctx := server.Context()
	info := req.GetInfo()
	if info == nil {
		info = &pulumirpc.ProgramInfo{RootDirectory: req.GetDirectory(), ProgramDirectory: req.GetDirectory()}
	}
	tc, err := toolchainFor(info)
	if err != nil {
		return err
	}
	var stdout, stderr io.Writer = streamWriter{send: server.Send}, streamWriter{send: server.Send, stderr: true}
	dir := info.GetProgramDirectory()
	useTools := req.GetUseLanguageVersionTools()
	if venv, ok := existingPipVirtualenv(ctx, info, tc); ok && !useTools {
		return installRequirements(ctx, tc, dir, venv, stdout, stderr)
	}
	if err := tc.EnsureVenv(ctx, dir, useTools, true, stdout, stderr); err != nil {
		return err
	}
	return tc.InstallDependencies(ctx, dir, useTools, true, stdout, stderr)
}

// existingPipVirtualenv is the pip toolchain's virtualenv when the project names one that
// exists. The toolchain's InstallDependencies would run `python -m venv` over it again and
// upgrade pip, setuptools and wheel from the index every time (which needs the network, also
// for a plugin such as `pulumi package add <dir>` runs); an existing one only needs the
// project's requirements.
func existingPipVirtualenv(
	ctx context.Context, info *pulumirpc.ProgramInfo, tc toolchain.Toolchain,
) (string, bool) {
	fields := info.GetOptions().GetFields()
	if _, ok := fields["virtualenv"]; !ok {
		return "", false
	}
	if v, ok := fields["toolchain"]; ok && v.GetStringValue() != "pip" {
		return "", false
	}
	venv, err := tc.VirtualEnvPath(ctx)
	if err != nil || venv == "" || !toolchain.IsVirtualEnv(venv) {
		return "", false
	}
	return venv, true
}

// installRequirements runs `pip install -r requirements.txt` in dir with the virtualenv's
// interpreter, when dir has that file.
func installRequirements(
	ctx context.Context, tc toolchain.Toolchain, dir, venv string, stdout, stderr io.Writer,
) error {
	if _, err := os.Stat(filepath.Join(dir, "requirements.txt")); err != nil {
		return nil
	}
	cmd, err := tc.ModuleCommand(ctx, "pip", "install", "-r", "requirements.txt")
	if err != nil {
		return err
	}
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	fmt.Fprintf(stdout, "Installing dependencies in virtual environment %s...\n", venv)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("installing the requirements of %s into %s: %w", dir, venv, err)
	}
	return nil
}

func (h *host) RuntimeOptionsPrompts(
	context.Context, *pulumirpc.RuntimeOptionsRequest,
) (*pulumirpc.RuntimeOptionsResponse, error) {
	return &pulumirpc.RuntimeOptionsResponse{}, nil
}

func (h *host) About(ctx context.Context, req *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	tc, err := toolchainFor(req.GetInfo())
	if err != nil {
		return nil, err
	}
	cmd, err := tc.Command(ctx, "-c", aboutScript)
	if err != nil {
		return nil, err
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("asking the Python interpreter its version: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("unexpected answer from the Python interpreter: %q", out)
	}
	return &pulumirpc.AboutResponse{Executable: lines[0], Version: strings.TrimSpace(lines[1])}, nil
}

func (h *host) GetProgramDependencies(
	ctx context.Context, req *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	tc, err := toolchainFor(req.GetInfo())
	if err != nil {
		return nil, err
	}
	packages, err := tc.ListPackages(ctx, req.GetTransitiveDependencies())
	if err != nil {
		return nil, err
	}
	resp := &pulumirpc.GetProgramDependenciesResponse{}
	for _, p := range packages {
		resp.Dependencies = append(resp.Dependencies, &pulumirpc.DependencyInfo{Name: p.Name, Version: p.Version})
	}
	return resp, nil
}

// RunPlugin runs a plugin written in Python: a policy pack (PulumiPolicy.yaml, runtime python)
// or a component provider (PulumiPlugin.yaml). Like Pulumi's own host, it runs the plugin's
// directory (its `__main__.py`) with the interpreter of the plugin's toolchain options, the
// engine's arguments after it, in the directory the engine asks, streaming its output back;
// the plugin prints its port on the first line of stdout.
func (h *host) RunPlugin(
	req *pulumirpc.RunPluginRequest, server pulumirpc.LanguageRuntime_RunPluginServer,
) error {
	info := req.GetInfo()
	if info == nil {
		return errors.New("RunPlugin: no program info")
	}
	tc, err := toolchainFor(info)
	if err != nil {
		return err
	}
	dir := info.GetProgramDirectory()
	if dir == "" {
		dir = info.GetRootDirectory()
	}
	args := append([]string{"-u", dir}, req.GetArgs()...)
	cmd, err := tc.Command(server.Context(), args...)
	if err != nil {
		return err
	}
	closer, stdout, stderr, err := rpcutil.MakeRunPluginStreams(server, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	cmd.Dir = req.GetPwd()
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, req.GetEnv()...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return fmt.Errorf("running the Python plugin in %s: %w", dir, err)
		}
		return server.Send(&pulumirpc.RunPluginResponse{
			Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: int32(exit.ExitCode())},
		})
	}
	return closer.Close()
}
