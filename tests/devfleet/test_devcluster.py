"""The local dev cluster: pure unit tests (certificates, wrapper go.mod, kubeconfig) and tests
against a real kube-apiserver on 127.0.0.1 (marked ``apiserver``)."""

from __future__ import annotations

import base64
import ipaddress
import os
import re
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from typer.testing import CliRunner

from modelplane.devcluster import (
    KINE_VERSION,
    KUBERNETES_VERSION,
    DevCluster,
    GoError,
    ensure_kube_binaries,
    kube_cache_dir,
    start_dev_cluster,
)
from modelplane.devcluster.certs import (
    PKIPaths,
    generate_ca,
    generate_client_cert,
    generate_service_account_keys,
    generate_serving_cert,
    write_pki,
)
from modelplane.devcluster.crds import default_crds_dir, load_manifests
from modelplane.devcluster.launch import (
    ManagedProcess,
    apiserver_argv,
    controller_manager_argv,
    kine_argv,
    pid_runs,
    scheduler_argv,
    spawn,
)
from modelplane.devcluster.server import render_kubeconfig
from modelplane.gobuild.kube import (
    apiserver_ldflags,
    kine_ldflags,
    render_apiserver_gomod,
    render_kine_gomod,
    staging_modules,
)
from modelplane.gobuild.kube_versions import staging_version
from tests.fixtures.apiserver import api_client, kube_binaries_or_skip

# The 31 staging modules of Kubernetes 1.34/1.35.
STAGING_1_35 = [
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "sample-apiserver",
    "sample-cli-plugin",
    "sample-controller",
]


def fake_kubernetes_gomod() -> str:
    """A go.mod shaped like k8s.io/kubernetes v1.35.x (requires + staging replaces)."""
    requires = "\n".join(f"\tk8s.io/{m} v0.0.0" for m in STAGING_1_35)
    replaces = "\n".join(f"\tk8s.io/{m} => ./staging/src/k8s.io/{m}" for m in STAGING_1_35)
    return (
        "// This is a generated file. Do not edit directly.\n\n"
        "module k8s.io/kubernetes\n\ngo 1.25.0\n\ngodebug default=go1.25\n\n"
        "require (\n\tgithub.com/blang/semver/v4 v4.0.0\n"
        f"{requires}\n)\n\n"
        f"replace (\n{replaces}\n)\n"
        "replace github.com/example/broken => github.com/example/fixed v1.2.3 // upstream fix\n"
    )


# --------------------------------------------------------------------------- unit: versions


def test_versions_are_pinned_to_1_35_or_later() -> None:
    major, minor, _ = (int(p) for p in KUBERNETES_VERSION.split("."))
    assert (major, minor) >= (1, 34)
    assert staging_version("1.35.8") == "v0.35.8"
    with pytest.raises(ValueError):
        staging_version("1.35")


def test_cache_dir_layout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MODELPLANE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    expected = f"k8s-v{KUBERNETES_VERSION}-kine-v{KINE_VERSION}"
    assert kube_cache_dir() == tmp_path / "xdg" / "modelplane" / "kube" / expected
    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path / "mp"))
    assert kube_cache_dir("1.34.2", "0.16.0") == tmp_path / "mp" / "kube" / (
        "k8s-v1.34.2-kine-v0.16.0"
    )


def test_cached_binaries_are_used_without_building(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MODELPLANE_KUBE_BIN_DIR", raising=False)
    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path))
    bin_dir = kube_cache_dir() / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kine"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    messages: list[str] = []
    found = ensure_kube_binaries(progress=messages.append)
    assert found.kube_apiserver == bin_dir / "kube-apiserver"
    assert found.kine == bin_dir / "kine"
    assert messages == []  # nothing built, nothing said


def test_prebuilt_bin_dir_must_be_complete(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MODELPLANE_KUBE_BIN_DIR", str(tmp_path))
    with pytest.raises(GoError, match="does not contain executable"):
        ensure_kube_binaries(progress=None)


# --------------------------------------------------------------------------- unit: go.mod


def test_staging_modules_are_read_from_the_kubernetes_gomod() -> None:
    assert staging_modules(fake_kubernetes_gomod()) == sorted(f"k8s.io/{m}" for m in STAGING_1_35)


def test_apiserver_wrapper_gomod() -> None:
    text = render_apiserver_gomod("1.35.8", fake_kubernetes_gomod())
    lines = [line.strip() for line in text.splitlines()]
    assert "module modelplane.local/build/kube-apiserver" in lines
    assert "go 1.25.0" in lines
    assert "godebug default=go1.25" in lines  # copied: a dependency's godebug is ignored
    for command in ("kube-apiserver", "kube-scheduler", "kube-controller-manager"):
        assert f"k8s.io/kubernetes/cmd/{command}" in lines  # one module, one `go build`
    assert "k8s.io/kubernetes/cmd/kubectl" not in lines  # nothing uses it
    assert "k8s.io/kubernetes v1.35.8" in lines
    for module in STAGING_1_35:
        assert f"k8s.io/{module} => k8s.io/{module} v0.35.8" in lines
    replaces = [line for line in lines if "=>" in line]
    assert len(replaces) == len(STAGING_1_35) + 1
    assert "github.com/example/broken => github.com/example/fixed v1.2.3" in lines
    assert "./staging" not in text  # no local path replace survives


def test_kine_wrapper_gomod() -> None:
    kine_gomod = "module github.com/k3s-io/kine\n\ngo 1.25.1\n\nrequire (\n\tx.io/y v1.0.0\n)\n"
    text = render_kine_gomod("0.16.4", kine_gomod)
    lines = [line.strip() for line in text.splitlines()]
    assert "go 1.25.1" in lines
    assert "tool github.com/k3s-io/kine" in lines
    assert "github.com/k3s-io/kine v0.16.4" in lines
    assert "replace (" not in lines
    assert not any(line.startswith("godebug") for line in lines)


def test_version_stamping_ldflags() -> None:
    flags = apiserver_ldflags("1.35.8", "abc123", "2026-08-20T15:16:14Z")
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {package}.gitVersion=v1.35.8" in flags
        assert f"-X {package}.gitMajor=1" in flags
        assert f"-X {package}.gitMinor=35" in flags
        assert f"-X {package}.gitCommit=abc123" in flags
    assert "-X github.com/k3s-io/kine/pkg/version.Version=v0.16.4" in kine_ldflags("0.16.4", "x")


# --------------------------------------------------------------------------- unit: certificates


def test_serving_cert_sans_and_chain() -> None:
    ca = generate_ca()
    serving = generate_serving_cert(ca)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    cert = x509.load_pem_x509_certificate(serving.cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    assert cert.issuer == ca_cert.subject
    cert.verify_directly_issued_by(ca_cert)
    assert ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    key = serialization.load_pem_private_key(serving.key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()
    assert "redacted" in repr(serving) and "PRIVATE" not in repr(serving)


def test_admin_client_cert_is_in_system_masters() -> None:
    ca = generate_ca()
    cert = x509.load_pem_x509_certificate(generate_client_cert(ca).cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "modelplane-admin"
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert_pem))


def test_service_account_key_pair_matches() -> None:
    sa = generate_service_account_keys()
    private = serialization.load_pem_private_key(sa.key_pem, password=None)
    public = serialization.load_pem_public_key(sa.cert_pem)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert private.public_key().public_numbers() == public.public_numbers()


def test_write_pki_protects_private_keys(tmp_path: Path) -> None:
    paths = write_pki(tmp_path / "pki")
    assert stat.S_IMODE((tmp_path / "pki").stat().st_mode) == 0o700
    for key in (paths.ca_key, paths.serving_key, paths.admin_key, paths.sa_private_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    for public in (paths.ca_cert, paths.serving_cert, paths.admin_cert, paths.sa_public_key):
        assert b"PRIVATE" not in public.read_bytes()


# --------------------------------------------------------------------------- unit: kubeconfig


def test_kubeconfig_structure(tmp_path: Path) -> None:
    ca = generate_ca()
    admin = generate_client_cert(ca)
    text = render_kubeconfig(
        name="dev",
        server="https://127.0.0.1:6443",
        ca_cert_pem=ca.cert_pem,
        client_cert_pem=admin.cert_pem,
        client_key_pem=admin.key_pem,
    )
    config = yaml.safe_load(text)
    assert config["apiVersion"] == "v1" and config["kind"] == "Config"
    assert config["current-context"] == "dev"
    (cluster,) = config["clusters"]
    (user,) = config["users"]
    (context,) = config["contexts"]
    assert cluster["name"] == "dev"
    assert cluster["cluster"]["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["cluster"]["certificate-authority-data"]) == ca.cert_pem
    assert base64.b64decode(user["user"]["client-certificate-data"]) == admin.cert_pem
    assert base64.b64decode(user["user"]["client-key-data"]) == admin.key_pem
    assert context == {"name": "dev", "context": {"cluster": "dev", "user": user["name"]}}
    # The kubernetes client accepts it.
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(path), client_configuration=configuration)
    assert configuration.host == "https://127.0.0.1:6443"


def test_process_flags_bind_only_loopback(tmp_path: Path) -> None:
    paths = write_pki(tmp_path / "pki")
    api = apiserver_argv(
        Path("/bin/kube-apiserver"), port=6443, etcd_port=2379, pki=paths, cert_dir=tmp_path
    )
    kine = kine_argv(Path("/bin/kine"), port=2379, database=tmp_path / "state.db")
    assert "--bind-address=127.0.0.1" in api
    assert "--advertise-address=127.0.0.1" in api
    assert "--etcd-servers=http://127.0.0.1:2379" in api
    assert "--listen-address=127.0.0.1:2379" in kine
    assert "--metrics-bind-address=0" in kine
    for flag in api + kine:
        for address in re.findall(r"\b\d+\.\d+\.\d+\.\d+\b", flag):
            assert address == "127.0.0.1" or flag.startswith("--service-cluster-ip-range=")


@pytest.mark.parametrize(
    ("host", "extra", "service_range", "authorization"),
    [
        ("127.0.0.1", (), "10.0.0.0/24", "RBAC"),  # dev-cluster
        ("127.77.7.11", ("--token-auth-file=/t.csv",), "10.96.0.0/16", "Node,RBAC"),  # dev-fleet
    ],
    ids=["dev-cluster", "dev-fleet"],
)
def test_one_launcher_binds_every_process_to_its_host(
    tmp_path: Path, host: str, extra: tuple[str, ...], service_range: str, authorization: str
) -> None:
    pki = PKIPaths.under(tmp_path / "pki")
    api = apiserver_argv(
        Path("/bin/kube-apiserver"),
        host=host,
        port=6443,
        etcd_port=2379,
        pki=pki,
        cert_dir=tmp_path,
        service_range=service_range,
        authorization=authorization,
        extra=extra,
    )
    kine = kine_argv(Path("/bin/kine"), host=host, port=2379, database=tmp_path / "db")
    kcm = controller_manager_argv(
        Path("/bin/kcm"), host=host, kubeconfig=tmp_path / "kc", pki=pki, extra=extra
    )
    sched = scheduler_argv(Path("/bin/ks"), host=host, config=tmp_path / "s", kubeconfig=tmp_path)
    assert f"--etcd-servers=http://{host}:2379" in api and f"--listen-address={host}:2379" in kine
    assert f"--advertise-address={host}" in api
    assert f"--service-account-issuer=https://{host}:6443" in api
    assert f"--authorization-mode={authorization}" in api
    assert f"--service-cluster-ip-range={service_range}" in api
    for argv in (api, kcm):
        assert all(flag in argv for flag in extra)
    for argv in (api, kcm, sched):
        assert f"--bind-address={host}" in argv and "--profiling=false" in argv
    assert f"--tls-cert-file={tmp_path / 'pki' / 'apiserver.crt'}" in api
    assert f"--cluster-signing-key-file={tmp_path / 'pki' / 'ca.key'}" in kcm


def test_the_pki_layout_is_spelt_once(tmp_path: Path) -> None:
    assert write_pki(tmp_path / "pki") == PKIPaths.under(tmp_path / "pki")


def test_spawn_runs_through_an_exec_prefix_in_its_own_session(tmp_path: Path) -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    process = spawn(
        "sleeper",
        [sleep, "30"],
        cwd=tmp_path,
        log_path=tmp_path / "logs" / "sleeper.log",
        prefix=["env", "MODELPLANE_TEST=1"],  # execs the command in place, as `ip netns exec`
        env={"PATH": os.environ["PATH"]},
    )
    try:
        deadline = time.monotonic() + 10
        while not pid_runs(process.pid, sleep) and time.monotonic() < deadline:
            time.sleep(0.02)  # `env` execs the command a moment after the fork
        assert process.running() and pid_runs(process.pid, sleep)
        assert os.getpgid(process.pid) == process.pid
        environ = Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")
        assert b"MODELPLANE_TEST=1" in environ
    finally:
        process.stop(timeout=5)
    assert not process.running()


def test_state_round_trip_holds_no_secrets(tmp_path: Path) -> None:
    paths = write_pki(tmp_path / "pki")
    cluster = DevCluster(
        name="dev",
        workdir=tmp_path,
        server="https://127.0.0.1:1234",
        kubeconfig_path=tmp_path / "kubeconfig",
        pki=paths,
        processes=[ManagedProcess("kine", 1, "/bin/kine", tmp_path / "kine.log")],
        kubernetes_version="1.35.8",
    )
    saved = cluster.save_state()
    assert "PRIVATE" not in saved.read_text()
    loaded = DevCluster.load_state(saved)
    assert loaded.server == cluster.server and loaded.pki == cluster.pki
    assert loaded.processes[0].pid == 1
    assert not pid_runs(1, "/bin/kine")  # pid 1 is not kine: pid-reuse guard


def test_vendored_crds_are_present() -> None:
    manifests = load_manifests(default_crds_dir())
    names = {m["metadata"]["name"] for m in manifests if m["kind"] == "CustomResourceDefinition"}
    assert {
        "leaderworkersets.leaderworkerset.x-k8s.io",
        "httproutes.gateway.networking.k8s.io",
        "gateways.gateway.networking.k8s.io",
        "inferencepools.inference.networking.k8s.io",
    } <= names
    kinds = {m["kind"] for m in manifests}
    assert "ValidatingAdmissionPolicy" in kinds


# --------------------------------------------------------------------------- real API server


def _listeners(pids: set[int]) -> list[tuple[str, int]]:
    """(local address, pid) of every listening TCP/UDP socket owned by ``pids`` (ss -ltunp)."""
    if shutil.which("ss") is None:
        pytest.skip("ss is not installed")
    out = subprocess.run(
        ["ss", "-H", "-l", "-t", "-u", "-n", "-p"], capture_output=True, text=True, check=True
    ).stdout
    found: list[tuple[str, int]] = []
    for line in out.splitlines():
        fields = line.split()
        for pid in (int(p) for p in re.findall(r"pid=(\d+)", line)):
            if pid in pids:
                found.append((fields[4], pid))
    return found


@pytest.mark.apiserver
def test_version_is_stamped(dev_cluster_api: Any) -> None:
    info = k8s.VersionApi(dev_cluster_api).get_code()
    assert info.git_version == f"v{KUBERNETES_VERSION}"
    assert info.major == "1"
    assert info.minor == KUBERNETES_VERSION.split(".")[1]


@pytest.mark.apiserver
def test_kubeconfig_works_and_is_private(dev_cluster: DevCluster) -> None:
    assert stat.S_IMODE(dev_cluster.kubeconfig_path.stat().st_mode) == 0o600
    assert "client-key-data" in dev_cluster.kubeconfig_text
    assert "client-key-data" not in repr(dev_cluster)
    with k8s_config.new_client_from_config(config_file=str(dev_cluster.kubeconfig_path)) as c:
        names = [n.metadata.name for n in k8s.CoreV1Api(c).list_namespace().items]
    assert "default" in names


@pytest.mark.apiserver
def test_resource_claim_template_v1(dev_cluster_api: Any) -> None:
    core = k8s.CoreV1Api(dev_cluster_api)
    core.create_namespace({"metadata": {"name": "dra-test"}})
    expression = 'device.driver == "gpu.nvidia.com" && device.capacity["gpu.nvidia.com"].memory'
    expression += '.compareTo(quantity("80Gi")) >= 0'
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpus"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "gpu.nvidia.com",
                                "count": 2,
                                "selectors": [{"cel": {"expression": expression}}],
                            },
                        }
                    ]
                }
            }
        },
    }
    resource = k8s.ResourceV1Api(dev_cluster_api)
    resource.create_namespaced_resource_claim_template("dra-test", body)
    got = resource.read_namespaced_resource_claim_template("gpus", "dra-test")
    request = got.spec.spec.devices.requests[0]
    assert request.name == "gpu"
    assert request.exactly.device_class_name == "gpu.nvidia.com"
    assert request.exactly.count == 2
    assert request.exactly.selectors[0].cel.expression == expression
    assert request.exactly.allocation_mode == "ExactCount"  # defaulted by the server

    bad = dict(body, metadata={"name": "bad"})
    bad_exactly = bad["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    bad["spec"] = {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {**bad_exactly, "selectors": [{"cel": {"expression": "1 +"}}]},
                    }
                ]
            }
        }
    }
    with pytest.raises(k8s.ApiException) as rejected:
        resource.create_namespaced_resource_claim_template("dra-test", bad)
    assert rejected.value.status == 422  # CEL is compiled by the server


@pytest.mark.apiserver
def test_crds_are_established(dev_cluster: DevCluster, dev_cluster_api: Any) -> None:
    assert dev_cluster.crds is not None
    assert dev_cluster.crds.skipped == []
    assert "ValidatingAdmissionPolicy/safe-upgrades.gateway.networking.k8s.io" in (
        dev_cluster.crds.others
    )
    ext = k8s.ApiextensionsV1Api(dev_cluster_api)
    for name in (
        "leaderworkersets.leaderworkerset.x-k8s.io",
        "httproutes.gateway.networking.k8s.io",
        "inferencepools.inference.networking.k8s.io",
    ):
        crd = ext.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in crd.status.conditions}
        assert conditions.get("Established") == "True", name
    assert len(dev_cluster.crds.crds) == len(
        [m for m in load_manifests(default_crds_dir()) if m["kind"] == "CustomResourceDefinition"]
    )


@pytest.mark.apiserver
def test_leaderworkerset_round_trip(dev_cluster_api: Any) -> None:
    custom = k8s.CustomObjectsApi(dev_cluster_api)
    body = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "llm"},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 4,
                "workerTemplate": {
                    "spec": {"containers": [{"name": "engine", "image": "vllm/vllm:v1"}]}
                },
            },
        },
    }
    group, version, plural = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
    custom.create_namespaced_custom_object(group, version, "default", plural, body)
    got = custom.get_namespaced_custom_object(group, version, "default", plural, "llm")
    assert got["spec"]["replicas"] == 2
    assert got["spec"]["leaderWorkerTemplate"]["size"] == 4
    assert got["spec"]["startupPolicy"] == "LeaderCreated"  # CRD schema default applied
    container = got["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert container["image"] == "vllm/vllm:v1"


@pytest.mark.apiserver
def test_listens_only_on_loopback(dev_cluster: DevCluster) -> None:
    listeners = _listeners(set(dev_cluster.pids()))
    assert listeners, "found no listening sockets of the dev cluster"
    for address, pid in listeners:
        assert address.startswith("127.0.0.1:"), (address, pid)
    ports = {int(address.rsplit(":", 1)[1]) for address, _ in listeners}
    assert dev_cluster.port in ports
    assert len(ports) == 2  # the API server and kine; the controller manager serves nothing


@pytest.mark.apiserver
def test_stop_leaves_no_process(tmp_path: Path) -> None:
    binaries = kube_binaries_or_skip()
    with start_dev_cluster(tmp_path / "c", binaries=binaries, crds=False) as cluster:
        pids = cluster.pids()
        # kine, kube-apiserver and kube-controller-manager (the garbage collector)
        assert len(pids) == 3 and cluster.running()
        with api_client(cluster) as c:
            assert k8s.VersionApi(c).get_code().git_version == f"v{KUBERNETES_VERSION}"
        port = cluster.port
    for process in cluster.processes:
        assert not process.running()
        assert not Path(f"/proc/{process.pid}").exists() or not pid_runs(
            process.pid, process.executable
        )
        with pytest.raises(ProcessLookupError):
            os.killpg(process.pid, 0)  # the whole process group is gone
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
    assert (tmp_path / "c" / "logs" / "kube-apiserver.log").stat().st_size > 0
    assert (tmp_path / "c" / "logs" / "kine.log").stat().st_size > 0
    cluster.stop()  # idempotent


@pytest.mark.apiserver
def test_cli_up_status_down(tmp_path: Path) -> None:
    kube_binaries_or_skip()
    from modelplane.cli.dev_cluster import app

    runner = CliRunner()
    directory = tmp_path / "dc"
    up = runner.invoke(app, ["up", "--dir", str(directory)])
    try:
        assert up.exit_code == 0, up.output
        assert f"export KUBECONFIG={directory / 'kubeconfig'}" in up.output
        assert "client-key-data" not in up.output and "PRIVATE KEY" not in up.output
        state = DevCluster.load_state(directory / "state.json")
        assert state.running()
        status = runner.invoke(app, ["status", "--dir", str(directory)])
        assert status.exit_code == 0, status.output
        assert "ok" in status.output
        again = runner.invoke(app, ["up", "--dir", str(directory)])
        assert again.exit_code == 0 and "already running" in again.output
    finally:
        down = runner.invoke(app, ["down", "--dir", str(directory)])
    assert down.exit_code == 0, down.output
    assert not (directory / "state.json").exists()
    for process in state.processes:
        assert not pid_runs(process.pid, process.executable)
        if Path("/proc/self").exists():  # started in this process: reaped, not a zombie
            assert not Path(f"/proc/{process.pid}").exists()
    stopped = runner.invoke(app, ["status", "--dir", str(directory)])
    assert stopped.exit_code == 1
