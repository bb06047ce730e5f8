"""PlacementLock: the scheduler's output, committed next to the specs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from modelplane.api.base import DNSLabel, Strict


class LockedReplica(Strict):
    name: DNSLabel
    cluster: DNSLabel
    index: int = Field(ge=0)
    pools: dict[Literal["unified", "prefill", "decode"], DNSLabel] = Field(min_length=1)

    @field_validator("pools")
    @classmethod
    def _role_set(cls, pools: dict[str, str]) -> dict[str, str]:
        if set(pools) not in ({"unified"}, {"prefill", "decode"}):
            raise ValueError("pools must be {unified} or {prefill, decode}")
        return pools


class LockedDeployment(Strict):
    replicas: list[LockedReplica] = Field(default_factory=list)


class PlacementLock(Strict):
    api_version: Literal["modelplane.ai/v1alpha1"] = "modelplane.ai/v1alpha1"
    kind: Literal["PlacementLock"] = "PlacementLock"
    deployments: dict[str, LockedDeployment] = Field(default_factory=dict)

    def replicas_of(self, key: str) -> list[LockedReplica]:
        dep = self.deployments.get(key)
        return list(dep.replicas) if dep else []
