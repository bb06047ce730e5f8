"""Pulumi mocks that record every registered resource (and answer stack references).

A `RecordingMonitor` sees each registration with its parent; `RecordingMocks`
returns each resource's inputs as its state (so outputs that echo inputs
resolve), and answers `pulumi:pulumi:StackReference` reads from the outputs of
stacks rendered before, keeping their secret outputs secret.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import struct_pb2
from pulumi.runtime.mocks import MockCallArgs, MockMonitor, MockResourceArgs, Mocks
from pulumi.runtime.rpc import _special_resource_sig, _special_sig_key

STACK_REFERENCE = "pulumi:pulumi:StackReference"
GATEWAY = "kubernetes:gateway.networking.k8s.io/v1:Gateway"


@dataclass(frozen=True)
class StackOutputs:
    values: Mapping[str, Any]
    secret: frozenset[str] = frozenset()


@dataclass
class Registration:
    type: str
    name: str
    parent_urn: str
    inputs: dict[str, Any]
    custom: bool
    provider: str = ""
    protect: bool = False

    @property
    def parent_type(self) -> str | None:
        if not self.parent_urn:
            return None
        qualified = self.parent_urn.split("::")[2]
        return qualified.split("$")[-1]


class RecordingMocks(Mocks):
    """Mocks whose resources echo their inputs; stack references read `upstream`."""

    def __init__(self, upstream: Callable[[str], StackOutputs | None]) -> None:
        self.upstream = upstream
        self.registrations: list[Registration] = []
        self._pending: dict[tuple[str, str], tuple[str, str, bool]] = {}

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        parent, provider, protect = self._pending.pop((args.typ, args.name), ("", "", False))
        self.registrations.append(
            Registration(
                args.typ, args.name, parent, dict(args.inputs), bool(args.custom), provider, protect
            )
        )
        if args.typ == STACK_REFERENCE:
            stack = str(args.inputs.get("name") or args.name).rsplit("/", 1)[-1]
            found = self.upstream(stack)
            outputs = dict(found.values) if found else {}
            secret = sorted(found.secret) if found else []
            return args.name, {
                "name": args.inputs.get("name", args.name),
                "outputs": outputs,
                "secretOutputNames": secret,
            }
        state = dict(args.inputs)
        if args.typ == GATEWAY and not state.get("status"):
            # Offline there is no controller to publish the address: show a placeholder.
            name = (state.get("metadata") or {}).get("name", args.name)
            state["status"] = {
                "addresses": [{"type": "Hostname", "value": f"{name}.render.invalid"}]
            }
        state.update(_cloud_assigned(args.typ, args.name, state))
        return f"{args.name}-id", state

    def call(self, args: MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        # Data sources (EKS add-on versions, a Capacity Block's dates) answer empty offline;
        # the failures list must be a list (None breaks the stock mock monitor).
        return {}, []


HA_VPN_GATEWAY = "gcp:compute/haVpnGateway:HaVpnGateway"
VPN_CONNECTION = "aws:ec2/vpnConnection:VpnConnection"


def _cloud_assigned(typ: str, name: str, state: dict[str, Any]) -> dict[str, Any]:
    """Placeholders for what only the cloud assigns and a path's other resources read: an
    HA VPN gateway's interface addresses, an AWS VPN connection's tunnels (TEST-NET-1
    addresses, link-local inside addresses; the pre-shared key stays a secret)."""
    if typ == HA_VPN_GATEWAY and not state.get("vpnInterfaces"):
        return {"vpnInterfaces": [{"id": i, "ipAddress": f"192.0.2.{1 + i}"} for i in (0, 1)]}
    if typ == VPN_CONNECTION and not state.get("tunnel1Address"):
        out: dict[str, Any] = {}
        for t in (1, 2):
            out[f"tunnel{t}Address"] = f"192.0.2.{10 + t}"
            out[f"tunnel{t}PresharedKey"] = f"render-placeholder-{name}-{t}"
            out[f"tunnel{t}CgwInsideAddress"] = f"169.254.{t}.2"
            out[f"tunnel{t}VgwInsideAddress"] = f"169.254.{t}.1"
        return out
    return {}


def _flatten_references(value: struct_pb2.Value) -> None:
    """Replace resource references by their URN, in place.

    The stock mock monitor rehydrates references into resource objects on its
    worker thread's own event loop, which the program's loop cannot await; a
    recording needs only the URN.
    """
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        fields = value.struct_value.fields
        sig = fields.get(_special_sig_key)
        if sig is not None and sig.string_value == _special_resource_sig:
            urn = fields["urn"].string_value if "urn" in fields else ""
            value.string_value = urn
            return
        for item in fields.values():
            _flatten_references(item)
    elif kind == "list_value":
        for item in value.list_value.values:
            _flatten_references(item)


def _without_references(request: Any, field: str) -> Any:
    copy = type(request)()
    copy.CopyFrom(request)
    for item in getattr(copy, field).fields.values():
        _flatten_references(item)
    return copy


class RecordingMonitor(MockMonitor):
    """A MockMonitor that tells the mocks each registration's parent and provider."""

    mocks: RecordingMocks

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        self.mocks._pending[(request.type, request.name)] = (
            request.parent,
            request.provider,
            bool(request.protect),
        )
        return super().RegisterResource(_without_references(request, "object"))

    def ReadResource(self, request: Any) -> Any:  # noqa: N802
        pending = (request.parent, request.provider, False)
        self.mocks._pending[(request.type, request.name)] = pending
        return super().ReadResource(_without_references(request, "properties"))
