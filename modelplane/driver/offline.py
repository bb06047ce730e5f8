"""What a preview needs beyond the engine: offline renders of the head (in process, mocks).

``pulumi preview`` of one stack sees its upstream stacks' *deployed* outputs. A preview of a
change would then lie about stacks downstream of the change (a new replica's endpoint is not
in the gateway's routes yet) and could not run at all for stacks that do not exist yet.
:class:`OfflinePreview` fills both gaps from the offline render of the head (the same
program under Pulumi's mocks, as ``modelplane render`` runs it):

- a stack that does not exist in the backend is never created by a preview: it is rendered
  and reported as ``new`` with the resources it would create;
- an existing stack that needs a cluster stack that does not exist yet (no kubeconfig to
  preview against) is rendered too, and says so;
- a stack downstream of a changed or new deployment or cache stack is previewed by the engine
  with that stack's rendered outputs laid over the deployed ones (non-secret outputs only),
  so its preview shows what ``up`` will really change.

Renders run one at a time (the mock runtime is process-wide state); each stack's render sees
the deployed outputs of existing, unchanged upstream stacks and the rendered outputs of new
or changed ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelplane.driver.results import ResourceChange
from modelplane.stacks import StackUnit

#: Kinds of stack whose outputs derive from the specs alone (safe to take from a render).
DERIVED_OUTPUTS = ("ModelDeployment", "ModelCache")


@dataclass(frozen=True)
class Rendered:
    """One stack's offline render: its resources and outputs (secrets kept apart)."""

    resources: list[ResourceChange]
    outputs: Mapping[str, Any]
    secret: frozenset[str]

    @property
    def count(self) -> int:
        return len(self.resources)


RealOutputs = Callable[[str], tuple[Mapping[str, Any], frozenset[str]] | None]


class OfflinePreview:
    """Renders on demand and decides, per stack, how the preview sees its upstream stacks."""

    def __init__(
        self,
        fleet_dir: Path,
        lock_path: Path,
        units: list[StackUnit],
        existing: set[str],
        real_outputs: RealOutputs,
        module: str = "modelplane.program",
    ) -> None:
        self.fleet_dir = fleet_dir
        self.lock_path = lock_path
        self.units = {u.name: u for u in units}
        self.existing = existing
        self.real_outputs = real_outputs
        self.module = module
        self.changed: set[str] = set()  # stacks whose preview shows changes
        self._renders: dict[str, Rendered] = {}
        self._lock = threading.RLock()

    # -- decisions (pure) -------------------------------------------------------------------

    def is_new(self, name: str) -> bool:
        return name not in self.existing

    def offline_reason(self, unit: StackUnit) -> str | None:
        """Why the engine cannot preview the stack (it is rendered instead), else None."""
        if self.is_new(unit.name):
            return "new stack (not in the backend yet): resources from the offline render"
        new_clusters = [
            d
            for d in unit.upstream
            if self.is_new(d) and self.units.get(d) and self.units[d].kind == "InferenceCluster"
        ]
        if new_clusters:
            return (
                f"needs new cluster stack(s) {', '.join(new_clusters)}, which do not exist yet: "
                "resources from the offline render"
            )
        return None

    def overridden(self, unit: StackUnit) -> list[str]:
        """The upstream stacks whose rendered outputs the stack's preview should see."""
        return [
            d
            for d in unit.upstream
            if d in self.units
            and self.units[d].kind in DERIVED_OUTPUTS
            and (self.is_new(d) or d in self.changed)
        ]

    def mark_changed(self, name: str) -> None:
        with self._lock:
            self.changed.add(name)

    # -- renders ----------------------------------------------------------------------------

    def _needs_render(self, name: str) -> bool:
        unit = self.units.get(name)
        return unit is not None and (
            self.is_new(name) or (name in self.changed and unit.kind in DERIVED_OUTPUTS)
        )

    def _upstream_of(self, unit: StackUnit) -> dict[str, Any]:
        """What the stack's stack references read: rendered or deployed outputs per upstream.

        Computed before the program runs (the mocks answer stack references on the mock
        monitor's thread, which must not render)."""
        from modelplane.render.mocks import StackOutputs
        from modelplane.render.runner import _review_outputs

        found: dict[str, Any] = {}
        for dep in unit.upstream:
            dep_unit = self.units.get(dep)
            if dep_unit is None:
                continue
            if self._needs_render(dep):
                rendered = self.render(dep)
                outputs = StackOutputs(dict(rendered.outputs), rendered.secret)
                if dep_unit.kind == "InferenceCluster":
                    outputs = _review_outputs(dep_unit, outputs)
                found[dep] = outputs
                continue
            real = self.real_outputs(dep)
            if real is not None:
                values, secret = real
                found[dep] = StackOutputs(dict(values), frozenset(secret))
        return found

    def render(self, name: str) -> Rendered:
        """The stack's offline render (cached; upstream as described in the module doc)."""
        with self._lock:
            if name in self._renders:
                return self._renders[name]
            from modelplane.render.runner import render_stack

            upstream = self._upstream_of(self.units[name])
            run = render_stack(
                name,
                fleet_dir=self.fleet_dir,
                lock_path=self.lock_path,
                upstream=upstream.get,
                module=self.module,
            )
            resources = [
                ResourceChange("create", "", reg.type, reg.name)
                for reg in run.registrations
                if reg.type != "pulumi:pulumi:StackReference"
            ]
            rendered = Rendered(resources, dict(run.outputs.values), frozenset(run.outputs.secret))
            self._renders[name] = rendered
            return rendered

    def overrides(self, unit: StackUnit) -> dict[str, dict[str, Any]]:
        """``{stack: {output: value}}`` for the program (``MODELPLANE_UPSTREAM_OUTPUTS``)."""
        out: dict[str, dict[str, Any]] = {}
        for dep in self.overridden(unit):
            rendered = self.render(dep)
            out[dep] = {
                k: _plain(v) for k, v in rendered.outputs.items() if k not in rendered.secret
            }
        return out


def _plain(value: Any) -> Any:
    from modelplane.render.runner import _plain as plain

    return plain(value)
