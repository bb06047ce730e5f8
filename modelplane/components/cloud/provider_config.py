"""The stack's `aws:*` config carried into the AWS provider a component makes for itself.

An EKS cluster gets its own `aws.Provider` for the spec's region (a fleet spans regions, the
default provider has one). A provider made that way does not read the stack's `aws:*` config
as the default provider does, so `aws:profile`, `aws:assumeRoles`, `aws:defaultTags`,
`aws:allowedAccountIds`, ... would be silently ignored: this module reads every setting the
provider takes from the stack's config (`pulumi config set aws:profile prod`) and passes it
on. The spec's region wins over `aws:region`. Values set as secrets stay secrets. A user who
wants full control passes their own provider (`opts.providers`), which is used as it is.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi

# The aws.Provider arguments (pulumi-aws 7) that come from config, by their Python name.
# `region` is the spec's; the rest is read as `aws:<camelCase>`.
AWS_SETTINGS = (
    "access_key",
    "allowed_account_ids",
    "assume_role_with_web_identity",
    "assume_roles",
    "custom_ca_bundle",
    "default_tags",
    "ec2_metadata_service_endpoint",
    "ec2_metadata_service_endpoint_mode",
    "endpoints",
    "forbidden_account_ids",
    "http_proxy",
    "https_proxy",
    "ignore_tags",
    "insecure",
    "max_retries",
    "no_proxy",
    "profile",
    "retry_mode",
    "s3_us_east1_regional_endpoint",
    "s3_use_path_style",
    "secret_key",
    "shared_config_files",
    "shared_credentials_files",
    "skip_credentials_validation",
    "skip_metadata_api_check",
    "skip_region_validation",
    "skip_requesting_account_id",
    "sts_region",
    "token",
    "use_dualstack_endpoint",
    "use_fips_endpoint",
)
# Plain strings: never parsed (a profile named `123` stays a string).
AWS_STRINGS = frozenset(
    {
        "access_key",
        "custom_ca_bundle",
        "ec2_metadata_service_endpoint",
        "ec2_metadata_service_endpoint_mode",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "profile",
        "retry_mode",
        "s3_us_east1_regional_endpoint",
        "secret_key",
        "sts_region",
        "token",
    }
)
# Always secret, whether or not the stack set them with --secret.
AWS_SECRETS = frozenset({"access_key", "secret_key", "token"})


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _parse(text: str) -> Any:
    """A config value as the provider takes it: objects and lists as written in the stack's
    config (the provider's own camelCase fields: a provider's inputs go to it as JSON)."""
    try:
        return json.loads(text)
    except ValueError:
        return text  # a plain string (a profile name)


def aws_provider_settings(config: pulumi.Config | None = None) -> dict[str, Any]:
    """The keyword arguments of `aws.Provider` the stack's `aws:*` config sets."""
    cfg = config or pulumi.Config("aws")
    out: dict[str, Any] = {}
    for arg in AWS_SETTINGS:
        key = camel(arg)
        if arg in AWS_SECRETS or _is_secret(cfg, key):  # read as a secret: no plain copy
            secret = cfg.get_secret(key)
            if secret is not None:
                out[arg] = secret if arg in AWS_STRINGS else secret.apply(_parse)
            continue
        raw = cfg.get(key)
        if raw is not None:
            out[arg] = raw if arg in AWS_STRINGS else _parse(raw)
    legacy = cfg.get("assumeRole")  # the one-role form older stacks set
    if legacy is not None and "assume_roles" not in out:
        out["assume_roles"] = [_parse(legacy)]
    return out


def _is_secret(cfg: pulumi.Config, key: str) -> bool:
    from pulumi.runtime.config import is_config_secret

    return bool(is_config_secret(cfg.full_key(key)))


__all__ = ["AWS_SETTINGS", "aws_provider_settings"]
