"""The stand-in model server's plain data: who answers, how it behaves, its counters."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class StandinIdentity:
    """Who answers: the pod a listener stands in for."""

    replica: str
    role: str = "worker"
    cluster: str = ""
    model: str = "standin"
    pod: str = ""
    namespace: str = ""

    def sentence(self) -> list[str]:
        words = [f"{self.model}", "stand-in:", "replica", self.replica, "role", self.role]
        words += ["cluster", self.cluster or "-"]
        if self.pod:
            words += ["pod", self.pod]
        return [*words, "answered."]

    @classmethod
    def of(cls, source: Any) -> StandinIdentity:
        """The identity named by ``source``'s attributes of the same names (a pod, CLI args)."""
        return cls(**{f.name: getattr(source, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class StandinConfig:
    """How a listener behaves.

    service_time: seconds a request holds a slot (for streams: before the first token).
    token_time: extra seconds per output token.
    concurrency: requests running at once; the rest wait in a FIFO queue. 0 means unlimited.
    output_tokens: tokens generated when the request asks for more (or does not say).
    ready: health answers 200 only when ready; while not ready every path but /metrics is 503.
      (``set_ready`` changes it at runtime.)
    prefix_tolerant: also serve ``/<anything>/v1/...`` (a request whose gateway did not rewrite).
    strict_model: answer 404 when the request names another model than the served one.
    load_time: seconds after the listener starts during which it is not ready (loading).
    revision: the revision served, sent as ``x-modelplane-revision`` ("" sends none).
    error_ratio: share of generation requests answered 500 (0..1, spread evenly).
    first_token_delay: extra seconds before the first token of every generation request.
    """

    service_time: float = 0.0
    token_time: float = 0.0
    concurrency: int = 0
    output_tokens: int = 16
    ready: bool = True
    prefix_tolerant: bool = False
    strict_model: bool = False
    load_time: float = 0.0
    revision: str = ""
    error_ratio: float = 0.0
    first_token_delay: float = 0.0

    def __post_init__(self) -> None:
        names = ("service_time", "token_time", "concurrency", "output_tokens", "load_time")
        names = (*names, "first_token_delay")
        problems = [
            f"{name} must be >= 0, got {getattr(self, name)!r}"
            for name in names
            if getattr(self, name) < 0
        ]
        if not 0 <= self.error_ratio <= 1:
            problems.append(f"error_ratio must be within 0..1, got {self.error_ratio!r}")
        if problems:
            raise ValueError("StandinConfig: " + "; ".join(problems))


@dataclass(frozen=True)
class StandinStats:
    """A snapshot of one listener's counters (the values /metrics reports)."""

    running: int
    waiting: int
    success: int
    prompt_tokens: int
    generation_tokens: int
    ready: bool


class StandinCounters:
    """The state of a ``StandinListener`` its mixins (generation, metrics) read and count."""

    identity: StandinIdentity
    config: StandinConfig
    running: int
    waiting: int
    success: int
    prompt_tokens: int
    generation_tokens: int
    _headers: dict[str, str]
