"""Derived names: replicas, stacks and workload objects (every name fits 63 characters)."""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 63
DEPLOYMENT_LABEL = "modelplane.ai/deployment"  # on every composed endpoint (api.md)


def short_hash(text: str, length: int = 5) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def replica_name(deployment: str, cluster: str, index: int, retry: int = 0) -> str:
    """`<deployment[:57]>-<sha256("<deployment>-<cluster>-<index>")[:5]>`; with `retry`
    n > 0 (the name was taken), the hash of `...-<index>#<n>` (`#` is in no name)."""
    base = deployment[:57].rstrip("-")
    text = f"{deployment}-{cluster}-{index}" + (f"#{retry}" if retry else "")
    return f"{base}-{short_hash(text)}"


def child_name(*parts: str, limit: int = MAX_NAME) -> str:
    """Join parts with '-'; when too long, cut and add a hash of the full name."""
    full = "-".join(p for p in parts if p)
    if len(full) <= limit:
        return full
    digest = short_hash(full, 8)
    return f"{full[: limit - len(digest) - 1].rstrip('-')}-{digest}"


def workload_name(replica: str, role: str) -> str:
    """The Deployment or LeaderWorkerSet of one role of a replica (`<replica>-<role>`, cut and
    hashed past 63 characters). The observation counts a pod for the replica only when this
    workload's controller owns it (security M9)."""
    return child_name(replica, role)


# A LeaderWorkerSet `<lws>` makes one worker StatefulSet `<lws>-<group>` per group, whose pods
# carry the label `controller-revision-hash: <lws>-<group>-<hash>` (hash up to 10 characters);
# a label value longer than 63 characters stops the worker pods from being created.
REVISION_HASH = 10


def lws_name_budget(groups: int) -> int:
    """The longest LeaderWorkerSet name whose worker pods can exist with `groups` groups."""
    return MAX_NAME - len(f"-{max(groups - 1, 0)}-") - REVISION_HASH


def lws_name_length(deployment: str, role: str) -> int:
    """Length of the LeaderWorkerSet name of any replica's `role` (`<replica>-<role>`)."""
    replica = len(deployment[:57].rstrip("-")) + 6
    return min(replica + 1 + len(role), MAX_NAME)


def gcp_name(*parts: str, prefix: str = "mp") -> str:
    """A valid GCP resource name (`[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63) from ``parts``;
    ``prefix`` first when they do not start with a letter."""
    full = re.sub(r"[^a-z0-9-]+", "-", "-".join(p for p in parts if p).lower()).strip("-")
    if not full[:1].isalpha():
        full = f"{prefix}-{full}"
    return child_name(full).rstrip("-")
