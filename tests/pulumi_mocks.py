"""Run Pulumi programs under the mock runtime and record what they register.

``pulumi.runtime.set_mocks`` is the documented way to unit-test a component graph: no engine, no
providers, no network. ``MockRun`` wires a recording monitor and mocks together:

    run = MockRun()
    component = run.run(lambda: MyComponent("x", ...))
    release = run.one("kubernetes:helm.sh/v3:Release", name="x-mp-keda")
    assert release.inputs["version"] == "2.20.2"
    assert run.is_secret(component.kubeconfig)

Every registered resource (components and custom resources alike) is recorded as a
``Registered``: type, name, inputs (decoded: secrets as ``Secret``, resource references as
``Ref``, unknowns as ``UNKNOWN``), parent URN and type, provider reference, ``depends_on`` URNs
and whether it is custom. ``new_resource`` answers with the inputs plus sensible outputs per
type (an ``id``; GKE ``endpoint``/``masterAuth``; an EKS cluster ``kubeconfig``; IAM ``arn``;
a Gateway ``status.addresses``; ...), overridable per type with ``outputs=``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pulumi
from google.protobuf import json_format
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor, MockResourceArgs, _resolve_callbacks, set_mocks
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.settings import SETTINGS
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

T = TypeVar("T")

_SPECIAL_SIG = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
_OUTPUT_SIG = "d0e6a833031e9bbcd3f4e8bde6ca49a4"
_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"

MANAGED_NODE_GROUP = "eks:index:ManagedNodeGroup"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
MOCK_CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nmock\n-----END CERTIFICATE-----\n")


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()
"""A value not known at registration (an unresolved output in preview)."""


@dataclass(frozen=True)
class Secret:
    """A secret input value (``pulumi.Output.secret``)."""

    value: Any


@dataclass(frozen=True)
class Ref:
    """A reference to another resource (passed as a resource, e.g. ``cluster=...``)."""

    urn: str
    id: str | None = None


@dataclass
class Registered:
    type: str
    name: str
    inputs: dict[str, Any]
    urn: str
    parent: str | None
    parent_type: str | None
    provider: str | None
    dependencies: list[str]
    custom: bool
    id: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    protect: bool = False
    ignore_changes: list[str] = field(default_factory=list)
    custom_timeouts: dict[str, str] = field(default_factory=dict)
    transforms: list[pulumi.ResourceTransform] = field(default_factory=list)
    """The resource's ``transforms`` (run by the engine on the children of a packaged
    component, e.g. pulumi-eks's; the mock monitor runs none: see ``transformed``)."""

    def get(self, path: str, default: Any = None) -> Any:
        """A nested input by dotted path (``"spec.listeners.0.port"``), secrets unwrapped."""
        value: Any = self.inputs
        for part in path.split("."):
            value = unwrap(value)
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return default
        return unwrap(value)

    def depends_on(self, other: Registered) -> bool:
        return other.urn in self.dependencies

    def transformed(
        self, type_: str, props: dict[str, Any] | None = None
    ) -> pulumi.ResourceOptions:
        """The options a child of ``type_`` ends up with after this resource's transforms
        (as the engine applies them to a packaged component's children)."""
        opts = pulumi.ResourceOptions()
        for transform in self.transforms:
            args = pulumi.ResourceTransformArgs(True, type_, "child", dict(props or {}), opts)
            result = transform(args)
            if result is not None and not hasattr(result, "__await__"):
                opts = result.opts
        return opts


def unwrap(value: Any) -> Any:
    """The value inside a ``Secret`` (recursively for containers)."""
    if isinstance(value, Secret):
        return unwrap(value.value)
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    return value


def contains_secret(value: Any) -> bool:
    if isinstance(value, Secret):
        return True
    if isinstance(value, list):
        return any(contains_secret(v) for v in value)
    if isinstance(value, dict):
        return any(contains_secret(v) for v in value.values())
    return False


def decode(value: Any) -> Any:
    """Decode the wire form of an input (``MessageToDict`` of the request) into plain data."""
    if isinstance(value, dict):
        sig = value.get(_SPECIAL_SIG)
        if sig == _SECRET_SIG:
            return Secret(decode(value.get("value")))
        if sig == _RESOURCE_SIG:
            return Ref(value.get("urn", ""), value.get("id") or None)
        if sig == _OUTPUT_SIG:
            inner = decode(value.get("value", UNKNOWN)) if "value" in value else UNKNOWN
            return Secret(inner) if value.get("secret") else inner
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    if value == _UNKNOWN:
        return UNKNOWN
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _aws_arn(args: MockResourceArgs) -> str:
    service = args.typ.split(":")[1].split("/")[0]
    return f"arn:aws:{service}:us-west-2:123456789012:{args.name}"


def _default_outputs(args: MockResourceArgs) -> dict[str, Any]:
    """Outputs a real provider would add, for the types modelplane reads."""
    name, inputs = args.name, args.inputs
    typ = args.typ
    if typ == "gcp:container/cluster:Cluster":
        return {
            "name": inputs.get("name", name),
            "endpoint": "203.0.113.10",
            "masterAuth": {"clusterCaCertificate": MOCK_CA.decode()},
            "selfLink": f"https://container.googleapis.com/{name}",
        }
    if typ.startswith("gcp:compute/"):
        return {
            "name": inputs.get("name", name),
            "selfLink": f"https://www.googleapis.com/compute/v1/{name}",
        }
    if typ == "eks:index:Cluster":
        cluster_name = inputs.get("name", name)
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": cluster_name,
                    "cluster": {
                        "server": f"https://{cluster_name}.eks.example.com",
                        "certificate-authority-data": MOCK_CA.decode(),
                    },
                }
            ],
            "contexts": [{"name": "aws", "context": {"cluster": cluster_name, "user": "aws"}}],
            "current-context": "aws",
            "users": [
                {
                    "name": "aws",
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "aws",
                            "args": ["eks", "get-token", "--cluster-name", cluster_name],
                        }
                    },
                }
            ],
        }
        return {
            "kubeconfig": kubeconfig,
            "kubeconfigJson": json.dumps(kubeconfig),
            "clusterSecurityGroupId": f"sg-{cluster_name}-cluster",
            "nodeSecurityGroupId": "",
        }
    if typ.startswith("aws:"):
        out: dict[str, Any] = {"arn": _aws_arn(args)}
        if typ == "aws:iam/role:Role":
            out["name"] = inputs.get("name", name)
        if typ == "aws:ec2/launchTemplate:LaunchTemplate":
            out["latestVersion"] = 1
        return out

    if typ == "kubernetes:gateway.networking.k8s.io/v1:Gateway":
        return {"status": {"addresses": [{"type": "IPAddress", "value": "192.0.2.10"}]}}
    return {}


def _default_id(args: MockResourceArgs) -> str:
    prefixes = {
        "aws:ec2/vpc:Vpc": "vpc-",
        "aws:ec2/subnet:Subnet": "subnet-",
        "aws:ec2/securityGroup:SecurityGroup": "sg-",
        "aws:ec2/launchTemplate:LaunchTemplate": "lt-",
        "aws:efs/fileSystem:FileSystem": "fs-",
    }
    return prefixes.get(args.typ, "") + f"{args.name}-id"


OutputHook = Callable[[MockResourceArgs], Mapping[str, Any]] | Mapping[str, Any]


CAPACITY_BLOCK_START = "2026-12-01T11:30:00Z"
CAPACITY_BLOCK_END = "2026-12-15T11:30:00Z"

DEFAULT_CALLS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "aws:eks/getAddonVersion:getAddonVersion": lambda a: {
        "addonName": a.get("addonName"),
        "kubernetesVersion": a.get("kubernetesVersion"),
        "version": f"{a.get('addonName')}-for-{a.get('kubernetesVersion')}",
    },
    "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation": lambda a: {
        "id": a.get("id"),
        "startDate": CAPACITY_BLOCK_START,
        "endDate": CAPACITY_BLOCK_END,
    },
}
"""What a provider's data sources answer (per invoke token), for the ones modelplane reads."""


class RecordingMocks(pulumi.runtime.Mocks):
    """Mocks answering every resource with its inputs plus per-type outputs."""

    def __init__(
        self,
        outputs: Mapping[str, OutputHook] | None = None,
        answers: Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]] | None = None,
    ) -> None:
        self.outputs = dict(outputs or {})
        self.answers = {**DEFAULT_CALLS, **(answers or {})}
        self.calls: list[pulumi.runtime.MockCallArgs] = []

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        state = dict(args.inputs)
        state.update(_default_outputs(args))
        hook = self.outputs.get(args.typ)
        if hook is not None:
            state.update(hook(args) if callable(hook) else hook)
        if not args.custom:
            return (None, state)
        return (args.resource_id or _default_id(args), state)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        self.calls.append(args)
        answer = self.answers.get(args.token)
        return (answer(dict(args.args)) if answer else {}, [])


class RecordingMonitor(MockMonitor):
    """A mock monitor that keeps every RegisterResource request, in order."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.registered: list[Registered] = []
        self._types: dict[str, str] = {}

    def _node_group(self, parent: str, name: str) -> dict[str, Any]:
        """A pulumi-eks ManagedNodeGroup's ``nodeGroup`` output: a reference to its
        ``aws.eks.NodeGroup`` (readable through getResource), whose Auto Scaling group is
        ``eks-<name>-asg``."""
        urn = self.make_urn(parent, NODE_GROUP, name)
        state = {"resources": [{"autoscalingGroups": [{"name": f"eks-{name}-asg"}]}]}
        self.resources[urn] = MockMonitor.ResourceRegistration(urn, f"{name}-ng", state)
        return {_SPECIAL_SIG: _RESOURCE_SIG, "urn": urn, "id": f"{name}-ng"}

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        # Like MockMonitor.RegisterResource, but inputs are decoded without rehydrating resource
        # references: rehydration starts tasks on this monitor thread's event loop, which the
        # program's loop then awaits ("attached to a different loop").
        urn = self.make_urn(request.parent, request.type, request.name)
        if request.type == "pulumi:pulumi:Stack":
            return resource_pb2.RegisterResourceResponse(urn=urn)
        _ensure_event_loop()
        inputs = decode(json_format.MessageToDict(request.object))
        args = MockResourceArgs(
            typ=request.type,
            name=request.name,
            inputs=_plain(inputs),
            provider=request.provider,
            resource_id=request.importId,
            custom=request.custom or False,
        )
        id_, state = self.mocks.new_resource(args)
        if request.type == MANAGED_NODE_GROUP and "nodeGroup" not in state:
            state["nodeGroup"] = self._node_group(urn, request.name)
        obj_proto = _sync_await(rpc.serialize_properties(state, {}))
        self.resources[urn] = MockMonitor.ResourceRegistration(urn, id_ or "", state)
        self._types[urn] = request.type
        self.registered.append(
            Registered(
                type=request.type,
                name=request.name,
                inputs=inputs,
                urn=urn,
                parent=request.parent or None,
                parent_type=self._types.get(request.parent) if request.parent else None,
                provider=request.provider or None,
                dependencies=list(request.dependencies),
                custom=bool(request.custom),
                id=id_,
                state=dict(state),
                protect=bool(request.protect),
                ignore_changes=list(request.ignoreChanges),
                custom_timeouts={
                    op: getattr(request.customTimeouts, op)
                    for op in ("create", "update", "delete")
                    if request.HasField("customTimeouts") and getattr(request.customTimeouts, op)
                },
                transforms=_resolve_callbacks(request.transforms),
            )
        )
        return resource_pb2.RegisterResourceResponse(urn=urn, id=id_ or "", object=obj_proto)


def _plain(value: Any) -> Any:
    """Decoded inputs as the mocks see them: secrets unwrapped, references as URNs."""
    if isinstance(value, Secret):
        return _plain(value.value)
    if isinstance(value, Ref):
        return value.urn
    if value is UNKNOWN:
        return _UNKNOWN
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class MockRun:
    """One mocked Pulumi program run (create one per test)."""

    def __init__(
        self,
        outputs: Mapping[str, OutputHook] | None = None,
        *,
        answers: Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]] | None = None,
        project: str = "modelplane",
        stack: str = "test",
        preview: bool = False,
    ) -> None:
        self.mocks = RecordingMocks(outputs, answers)
        self.monitor = RecordingMonitor(self.mocks)
        # Pulumi's runtime uses the thread's current event loop, and set_mocks registers the
        # root stack resource at once; an earlier `asyncio.run()` in the same process (a
        # dev-fleet stand-in test, the engine tests' CLI runs) leaves none set, and then every
        # later mocked run would fail, whichever test module comes next.
        _ensure_event_loop()
        set_mocks(self.mocks, project=project, stack=stack, preview=preview, monitor=self.monitor)

    @classmethod
    def of(cls, program: Callable[[], object], **options: Any) -> MockRun:
        """A new run (``options``: as ``MockRun``'s) of ``program``, done."""
        run = cls(**options)
        run.run(program)
        return run

    def run(self, program: Callable[[], T]) -> T:
        """Run ``program`` in the Pulumi runtime, wait for every registration, return its value."""
        SETTINGS.rpc_manager.clear()
        SETTINGS.outputs.clear()
        holder: dict[str, T] = {}
        _ensure_event_loop()  # as in __init__

        def main() -> None:
            holder["result"] = program()

        _sync_await(run_pulumi_func(main))
        return holder["result"]

    # --- queries -------------------------------------------------------------------------
    @property
    def resources(self) -> list[Registered]:
        return list(self.monitor.registered)

    def __iter__(self) -> Iterator[Registered]:
        return iter(self.monitor.registered)

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.monitor.registered if r.type == type_]

    def find(self, type_: str | None = None, name: str | None = None) -> list[Registered]:
        return [
            r
            for r in self.monitor.registered
            if (type_ is None or r.type == type_) and (name is None or r.name == name)
        ]

    def one(self, type_: str, name: str | None = None) -> Registered:
        found = self.find(type_, name)
        if len(found) != 1:
            known = sorted({f"{r.type} {r.name}" for r in self.monitor.registered})
            raise AssertionError(
                f"expected exactly one {type_} {name or ''}, found {len(found)}; "
                f"registered: {known}"
            )
        return found[0]

    def by_urn(self, urn: str) -> Registered:
        return next(r for r in self.monitor.registered if r.urn == urn)

    def children_of(self, parent: Registered) -> list[Registered]:
        return [r for r in self.monitor.registered if r.parent == parent.urn]

    def provider_of(self, resource: Registered) -> Registered | None:
        """The provider resource a custom resource was registered with."""
        if not resource.provider:
            return None
        urn = resource.provider.split("::")
        return self.by_urn("::".join(urn[:-1]))

    # --- outputs -------------------------------------------------------------------------
    @staticmethod
    def value(output: Any) -> Any:
        """The resolved value of an output (call after ``run``)."""
        if isinstance(output, pulumi.Output):
            return _sync_await(output.future())
        return output

    @staticmethod
    def is_secret(output: Any) -> bool:
        return isinstance(output, pulumi.Output) and bool(_sync_await(output.is_secret()))
