"""Moving a fleet's stacks from the project every fleet shared before (``modelplane``) to
the fleet's own (``modelplane migrate DIR``; docs/architecture.md, "Stacks").

A stack moves with ``pulumi stack rename <org>/modelplane/<stack> <org>/<project>/<stack>``:
the backend moves its state and history and rewrites its resources' URNs, so the next
``up`` changes nothing in the cloud. Only the stacks the fleet derives move (two fleets that
shared the legacy project cannot be told apart by anything else); a stack whose new name is
taken stays and is reported. Runtime state kept in a ``postgres://`` backend under the old
fleet key (the directory's name) moves to the project's key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from modelplane.driver.project import LEGACY_PROJECT
from modelplane.driver.workspace import EngineSession


@dataclass
class Migration:
    project: str
    old_project: str = LEGACY_PROJECT
    moved: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # stack -> why it stayed
    runtime_documents: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "from": self.old_project,
            "to": self.project,
            "moved": self.moved,
            "kept": self.kept,
            "runtimeDocuments": self.runtime_documents,
        }


def migrate_stacks(session: EngineSession, old_project: str = LEGACY_PROJECT) -> Migration:
    """Rename the fleet's stacks of ``old_project`` into ``session.project``."""
    out = Migration(session.project, old_project)
    if old_project == session.project:
        return out
    every = session.all_stacks()
    taken = {(org, name) for org, project, name in every if project == session.project}
    for org, project, name in sorted(every):
        if project != old_project or name not in session.expected:
            continue
        if (org, name) in taken or ("", name) in taken:
            out.kept[name] = f"{session.project} already has a stack {name}"
            continue
        old = f"{org}/{old_project}/{name}" if org else name
        session.rename_stack(old, f"{org or 'organization'}/{session.project}/{name}")
        out.moved.append(name)
    return out
