"""Secret resolution order (architecture.md "Secrets"): config, env, then `file:`."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelplane.secrets import (
    PlaintextSecret,
    SecretNotFound,
    config_key,
    env_var,
    resolve_secret,
)


def no_config(_: str) -> str | None:
    return None


def test_names() -> None:
    assert config_key("hf-token", "HF_TOKEN") == "secrets.hf-token.HF_TOKEN"
    assert env_var("hf-token", "HF_TOKEN") == "MODELPLANE_SECRET_HF_TOKEN_HF_TOKEN"
    assert env_var("onprem.east", "kube-config") == "MODELPLANE_SECRET_ONPREM_EAST_KUBE_CONFIG"


def test_config_wins_over_env() -> None:
    seen: list[str] = []

    def config(key: str) -> str | None:
        seen.append(key)
        return "from-config"

    got = resolve_secret(
        "kc", "kubeconfig", config=config, env={"MODELPLANE_SECRET_KC_KUBECONFIG": "x"}
    )
    assert (got.value, got.source) == ("from-config", "config")
    assert seen == ["modelplane:secrets.kc.kubeconfig"]


def test_env_then_file(tmp_path: Path) -> None:
    got = resolve_secret(
        "kc", "kubeconfig", config=no_config, env={"MODELPLANE_SECRET_KC_KUBECONFIG": "e"}
    )
    assert (got.value, got.source) == ("e", "env")
    (tmp_path / "kube.yaml").write_text("file-content")
    got = resolve_secret(
        "file:kube.yaml", "kubeconfig", config=no_config, env={}, base_dir=tmp_path
    )
    assert (got.value, got.source) == ("file-content", "file")
    # Only inside the fleet folder (M7): an absolute path to the same file is refused.
    absolute = str(tmp_path / "kube.yaml")
    with pytest.raises(SecretNotFound, match="relative to the fleet folder"):
        resolve_secret(f"file:{absolute}", "k", config=no_config, env={}, base_dir=tmp_path)


def test_env_beats_file(tmp_path: Path) -> None:
    (tmp_path / "k").write_text("file")
    env = {env_var("file:k", "key"): "env"}
    assert (
        resolve_secret("file:k", "key", config=no_config, env=env, base_dir=tmp_path).value == "env"
    )


def test_not_found_names_every_place() -> None:
    with pytest.raises(SecretNotFound) as exc:
        resolve_secret("hf-token", "HF_TOKEN", config=no_config, env={})
    message = str(exc.value)
    assert "modelplane:secrets.hf-token.HF_TOKEN" in message
    assert "MODELPLANE_SECRET_HF_TOKEN_HF_TOKEN" in message
    assert "file:" in message
    with pytest.raises(SecretNotFound) as exc:
        resolve_secret("file:/does/not/exist", "k", config=no_config, env={})
    assert "/does/not/exist" in str(exc.value)


def test_empty_values_do_not_count() -> None:
    got = resolve_secret("a", "b", config=lambda _: "", env={"MODELPLANE_SECRET_A_B": "value"})
    assert got.source == "env"


@pytest.mark.parametrize(
    ("secret_keys", "outcome"),
    [
        ({"modelplane:secrets.kc.kubeconfig"}, "config"),  # `pulumi config set --secret`
        (set(), PlaintextSecret),  # plain `pulumi config set`: refused
    ],
)
def test_config_values_must_be_pulumi_secrets(
    secret_keys: set[str], outcome: str | type[Exception]
) -> None:
    def resolve() -> str:
        return resolve_secret(
            "kc",
            "kubeconfig",
            config=lambda _: "apiVersion: v1",
            env={},
            is_secret=secret_keys.__contains__,
        ).source

    if isinstance(outcome, str):
        assert resolve() == outcome
    else:
        with pytest.raises(outcome, match="pulumi config set --secret modelplane:secrets.kc"):
            resolve()
