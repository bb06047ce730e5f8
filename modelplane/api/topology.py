"""The derived shape of one worker, shared by the scheduler and the workloads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerShape:
    tensor: int
    pipeline: int
    data: int
    data_local: int

    @property
    def nodes_per_worker(self) -> int:
        return self.pipeline * self.data // self.data_local

    @property
    def gpus_per_node(self) -> int:
        return self.tensor * self.data_local

    @property
    def gpus_per_worker(self) -> int:
        return self.tensor * self.pipeline * self.data

    @property
    def pods_per_worker(self) -> int:
        return self.nodes_per_worker


# Engine flags (vLLM and SGLang spellings) that must agree with the topology.
PARALLEL_FLAGS: dict[str, str] = {
    "--tensor-parallel-size": "tensor",
    "--tp-size": "tensor",
    "--tp": "tensor",
    "-tp": "tensor",
    "--pipeline-parallel-size": "pipeline",
    "--pp-size": "pipeline",
    "-pp": "pipeline",
    "--data-parallel-size": "data",
    "--dp-size": "data",
    "-dp": "data",
    "--data-parallel-size-local": "data_local",
    "-dpl": "data_local",
    "--nnodes": "nodes",
}

# The env modelplane injects from the topology, by topology field (api.md "ModelDeployment").
TOPOLOGY_ENV: dict[str, str] = {
    "nodes": "MODELPLANE_NODES",
    "tensor": "MODELPLANE_TENSOR",
    "pipeline": "MODELPLANE_PIPELINE",
    "data": "MODELPLANE_DATA",
    "data_local": "MODELPLANE_DATA_LOCAL",
}


def flag_value_agrees(raw: str, field: str, expected: int) -> bool:
    """A flag's value agrees when it is the expected number or names the injected
    variable of that field (`$(VAR)`, `$VAR`, `${VAR}`), quoted or not."""
    value = raw.strip("'\"")
    if value.isdigit():
        return int(value) == expected
    var = TOPOLOGY_ENV[field]
    return value in (f"$({var})", f"${var}", f"${{{var}}}")


def parallel_flags(argv: list[str]) -> list[tuple[str, str, str]]:
    """Find parallelism flags in engine args: (flag, topology field, raw value).

    Accepts `--flag=value`, `--flag value` as two items, and `--flag value` in one item.
    """
    tokens: list[str] = []
    for item in argv:
        tokens.extend(item.split())
    found: list[tuple[str, str, str]] = []
    for i, tok in enumerate(tokens):
        flag, eq, value = tok.partition("=")
        field = PARALLEL_FLAGS.get(flag)
        if field is None:
            continue
        if not eq:
            value = tokens[i + 1] if i + 1 < len(tokens) else ""
        found.append((flag, field, value))
    return found


POOL_PORT = 8000
"""On decode pods of a disaggregated deployment the P/D routing sidecar owns this port."""


def port_arg(argv: list[str]) -> int | None:
    """The value of `--port` in engine args (`--port=N`, `--port N`), if any."""
    tokens: list[str] = []
    for item in argv:
        tokens.extend(item.split())
    for i, tok in enumerate(tokens):
        flag, eq, value = tok.partition("=")
        if flag != "--port":
            continue
        if not eq:
            value = tokens[i + 1] if i + 1 < len(tokens) else ""
        if value.isdigit():
            return int(value)
    return None
