"""`modelplane render`: every stack's program under Pulumi's mock runtime, written to files.

No CLI, no credentials, no network. For a fleet directory the fleet is planned
(scheduled against its committed lock, as `up` would) and every stack of
`modelplane.stacks.stack_units` runs in tier order, in process, each in a fresh
context with its own mocks; a stack's StackReferences read the mocked outputs
of the stacks rendered before it. Output layout:

    OUT/modelplane.lock.yaml             the placement the render used
    OUT/<stack>/resources.yaml           every registered resource: type, name,
                                         parent (type), inputs; secrets as `[secret]`
    OUT/<stack>/outputs.yaml             the stack's exports (secrets as `[secret]`)
    OUT/<stack>/manifests/*.yaml         every Kubernetes object, applyable YAML,
                                         `<cluster>_<kind>_<namespace>_<name>.yaml`

XX
unknown offline; a cluster stack's missing `gatewayAddress` is shown as
`gateway.<cluster>.render.invalid` so the routes downstream can be reviewed.
Secret values never reach the files: the program runs with
`modelplane:allowMissingSecrets` (unresolvable secrets become placeholder
secrets) and every secret is written as `[secret]`.
"""

from modelplane.render.runner import (
    REDACTED,
    RenderError,
    RenderResult,
    StackRender,
    render_fleet,
    render_stack,
)

__all__ = [
    "REDACTED",
    "RenderError",
    "RenderResult",
    "StackRender",
    "render_fleet",
    "render_stack",
]
