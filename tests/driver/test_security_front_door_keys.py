"""The front-door key's rotation (security review M2): which keys the workload gateways
accept and which one the front door sends, over a rotation's life; the rendered htpasswd and
credentials; the fingerprint's view of the clock; the CLI's refusals. The engine half (the
key written into every stack's config) is `test_keys_front_door_rotation_in_every_stack`;
the drill under load on the dev fleet is in tests/devfleet/test_devfleet_auth.py."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest

from modelplane import front_door_keys as fdk
from modelplane.caller_keys import CallerKey, KeyFormatError, format_keys, rfc3339
from modelplane.components.workload import front_door
from modelplane.driver.fingerprint import front_door_phase

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
OLD = "o" * 43
AFTER, GRACE = timedelta(minutes=10), timedelta(hours=1)


def rotation() -> list[CallerKey]:
    return fdk.rotated([CallerKey(OLD)], T0, after=AFTER, grace=GRACE)


def users(htpasswd: str) -> dict[str, str]:
    return dict(line.split(":", 1) for line in htpasswd.splitlines())


def sha(key: str) -> str:
    return "{SHA}" + base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()  # noqa: S324


def test_keys_front_door_rotation_appends_a_later_key_and_ends_the_old() -> None:
    keys = rotation()
    assert [k.key for k in keys][0] == OLD and len(keys) == 2
    old, new = keys
    assert (old.id, old.not_before, old.not_after) == (None, None, T0 + GRACE)
    assert new.key != OLD and len(new.key) >= 43
    assert new.id is not None and new.not_before == T0 + AFTER and new.not_after is None
    # The text round-trips (what the stacks' config holds).
    assert fdk.parse(format_keys(keys)) == keys


@pytest.mark.parametrize(
    ("at", "accepted", "sent"),
    [
        (T0, ["old", "new"], "old"),  # the `up` after the rotation: gateways accept both
        (T0 + AFTER - timedelta(seconds=1), ["old", "new"], "old"),
        (T0 + AFTER, ["old", "new"], "new"),  # the switch
        (T0 + GRACE - timedelta(seconds=1), ["old", "new"], "new"),
        (T0 + GRACE, ["new"], "new"),  # the old key's end: its line goes
    ],
)
def test_keys_front_door_accepted_and_sent_over_a_rotation(
    at: datetime, accepted: list[str], sent: str
) -> None:
    keys = rotation()
    name = {OLD: "old", keys[1].key: "new"}
    assert [name[k.key] for k in fdk.accepted(keys, at)] == accepted
    assert name[fdk.sent(keys, at).key] == sent
    # Rendered: one htpasswd user per accepted key; the credentials of the sent one.
    text = format_keys(keys)
    lines = users(front_door.htpasswd(text, at))
    expected_users = {"old": "modelplane", "new": f"modelplane-{keys[1].id}"}
    assert lines == {expected_users[n]: sha(k.key) for k in keys if (n := name[k.key]) in accepted}
    token = front_door.basic_credentials(text, at).removeprefix("Basic ")
    user, _, key = base64.b64decode(token).decode().partition(":")
    assert (user, name[key]) == (expected_users[sent], sent)
    # The credentials sent are always among those accepted.
    assert lines[user] == sha(key)


def test_keys_front_door_one_key_is_what_it_always_was() -> None:
    """A fleet's key from before rotations: one line, user `modelplane`, no schedule."""
    assert front_door.htpasswd(OLD + "\n") == f"modelplane:{sha(OLD)}\n"
    assert (
        front_door.basic_credentials(OLD)
        == "Basic " + base64.b64encode(f"modelplane:{OLD}".encode()).decode()
    )
    assert fdk.phase(fdk.schedule(fdk.parse(OLD)), T0) is None


def test_keys_front_door_rotating_again_before_the_switch_ends_the_pending_key() -> None:
    first = rotation()
    second = fdk.rotated(first, T0 + timedelta(minutes=1), after=AFTER, grace=GRACE)
    assert len(second) == 3 and len({k.id for k in second}) == 3
    end = T0 + timedelta(minutes=1) + GRACE
    assert [k.not_after for k in second] == [T0 + GRACE, end, None]  # an earlier end kept
    assert second[1].not_before == T0 + AFTER  # still pending: its switch kept
    at = T0 + AFTER + timedelta(seconds=30)  # after the second key's switch
    assert fdk.sent(second, at) is second[1]
    assert fdk.sent(second, at + timedelta(minutes=1)) is second[2]  # the third's


def test_keys_front_door_rotation_drops_ended_keys() -> None:
    later = T0 + GRACE + timedelta(seconds=1)
    again = fdk.rotated(rotation(), later, after=AFTER, grace=GRACE)
    assert [k.key for k in again][0] != OLD and len(again) == 2


@pytest.mark.parametrize(
    ("after", "grace"),
    [(timedelta(hours=1), timedelta(hours=1)), (timedelta(hours=2), timedelta(hours=1))],
)
def test_keys_front_door_switch_must_come_before_the_end(
    after: timedelta, grace: timedelta
) -> None:
    with pytest.raises(ValueError, match="must come before"):
        fdk.rotated([CallerKey(OLD)], T0, after=after, grace=grace)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"{OLD}\n{'n' * 43}\n", "another key has no id"),
        (f"{OLD}\n{'n' * 43} id=ab\n{'m' * 43} id=ab\n", "another key has id='ab'"),
        (f"{OLD} id=Not_Ok\n", "is not 1 to 16 lowercase letters or digits"),
        (f"{OLD} notBefore=tomorrow\n", "notBefore='tomorrow' is not an RFC 3339 time"),
        (f"{OLD} id=a id=b\n", "repeated attribute 'id'"),
        (f"{OLD} owner=me\n", "unknown attribute 'owner'"),
        ("# nothing\n", "holds no key"),
    ],
)
def test_keys_front_door_malformed_text_is_refused_without_the_key(text: str, message: str) -> None:
    with pytest.raises(KeyFormatError, match=message) as caught:
        fdk.parse(text)
    assert OLD not in str(caught.value) and "n" * 43 not in str(caught.value)


def test_keys_front_door_every_key_ended_is_refused() -> None:
    keys = [CallerKey(OLD, T0), CallerKey("n" * 43, T0 + AFTER, T0, "ab")]
    with pytest.raises(KeyFormatError, match="every key has ended"):
        fdk.sent(keys, T0 + AFTER)
    with pytest.raises(KeyFormatError, match="rotate it"):
        front_door.basic_credentials(format_keys(keys), T0 + AFTER)


def test_keys_callers_keys_take_no_front_door_attribute() -> None:
    from modelplane.caller_keys import parse_keys

    with pytest.raises(KeyFormatError, match="unknown attribute 'notBefore'"):
        parse_keys(f"sk-mp-{'x' * 40} notBefore={rfc3339(T0)}\n")


# --- the fingerprint sees the clock only where a stack renders something else --------------


@pytest.mark.parametrize(
    ("at", "phase"),
    [
        (T0, {"accepted": ["modelplane", "modelplane-{id}"], "sent": "modelplane"}),
        (T0 + AFTER, {"accepted": ["modelplane", "modelplane-{id}"], "sent": "modelplane-{id}"}),
        (T0 + GRACE, {"accepted": ["modelplane-{id}"], "sent": "modelplane-{id}"}),
    ],
)
def test_keys_front_door_phase_at_each_instant(at: datetime, phase: dict) -> None:
    keys = rotation()
    expected = json.loads(json.dumps(phase).replace("{id}", str(keys[1].id)))
    assert fdk.phase(fdk.schedule(keys), at) == expected


def test_keys_front_door_schedule_holds_no_key() -> None:
    keys = rotation()
    text = fdk.schedule(keys, T0)
    assert all(k.key not in text for k in keys)
    assert [r["id"] for r in json.loads(text)["keys"]] == [None, keys[1].id]
    # Which of two schedules is newer: the later change, whatever the keys' times.
    switched = fdk.schedule(
        fdk.switched(keys, T0 + timedelta(minutes=1), grace=GRACE), T0 + timedelta(minutes=1)
    )
    assert fdk.changed(switched) > fdk.changed(text) > fdk.changed(None) == ""


@pytest.mark.parametrize(
    ("at", "sent"),
    [(T0 + timedelta(minutes=1), "new"), (T0 + timedelta(minutes=1, seconds=-1), "old")],
)
def test_keys_front_door_switch_sends_the_waiting_key_now(at: datetime, sent: str) -> None:
    """`keys switch` one minute after the rotation: the new key is sent from that moment,
    not from its `notBefore` nine minutes later; the old one ends `grace` after the switch."""
    keys = rotation()
    switch_at = T0 + timedelta(minutes=1)
    out = fdk.switched(keys, switch_at, grace=timedelta(minutes=5))
    assert out[1].not_before == switch_at and out[1].key == keys[1].key
    assert out[0].not_after == switch_at + timedelta(minutes=5)  # earlier than the rotation's
    name = {OLD: "old", keys[1].key: "new"}
    assert name[fdk.sent(out, at).key] == sent
    assert [name[k.key] for k in fdk.accepted(out, switch_at + timedelta(minutes=5))] == ["new"]


def test_keys_front_door_switch_without_a_waiting_key_is_refused() -> None:
    with pytest.raises(ValueError, match="no front-door key waits"):
        fdk.switched([CallerKey(OLD)], T0, grace=GRACE)
    with pytest.raises(ValueError, match="no front-door key waits"):
        fdk.switched(rotation(), T0 + AFTER, grace=GRACE)  # switched already


def test_keys_front_door_fingerprint_changes_at_the_switch_for_the_gateway_only() -> None:
    """At the switch only the gateway renders something new (the credentials it sends); at
    the end both (the deployments' htpasswd loses a line); other stacks never. No schedule:
    no entry at all."""
    keys = rotation()
    config = {fdk.SCHEDULE_CONFIG: fdk.schedule(keys)}
    at = {"rotated": T0, "switched": T0 + AFTER, "ended": T0 + GRACE}

    def seen(kind: str) -> dict[str, object]:
        return {label: front_door_phase(kind, config, {}, when) for label, when in at.items()}

    deploy, gateway = seen("ModelDeployment"), seen("InferenceGateway")
    assert deploy["rotated"] == deploy["switched"] != deploy["ended"]
    assert gateway["rotated"] != gateway["switched"] != gateway["ended"]
    assert set(seen("InferenceCluster").values()) == set(seen("ModelCache").values()) == {None}
    assert front_door_phase("InferenceGateway", {}, {}, T0) is None
    # The environment's key text, when set, is what the stacks read: its schedule counts.
    env = {"MODELPLANE_SECRET_MODELPLANE_FRONT_DOOR_KEY": format_keys(keys)}
    assert front_door_phase("InferenceGateway", {}, env, T0 + AFTER) == gateway["switched"]
    one = {"MODELPLANE_SECRET_MODELPLANE_FRONT_DOOR_KEY": OLD}
    assert front_door_phase("InferenceGateway", config, one, T0) is None


# --- the driver's hold: each transition made safe by the other stacks' previous `up` --------


def test_keys_front_door_hold_keeps_the_user_the_front_door_sent() -> None:
    """A workload gateway keeps accepting the user the front door sent last, even after its
    key ended, until the front door sends another (so an `up` that runs the deployments
    before the gateway never drops what the front door still sends)."""
    text = format_keys(rotation())
    ended = T0 + GRACE
    assert users(front_door.htpasswd(text, ended)).keys() == {f"modelplane-{rotation_id(text)}"}
    kept = fdk.keeping(text, "modelplane")
    assert users(front_door.htpasswd(kept, ended)).keys() == {
        "modelplane",
        f"modelplane-{rotation_id(text)}",
    }
    assert fdk.keeping(text, None) == text and fdk.keeping(text, "modelplane-nobody") == text


def rotation_id(text: str) -> str:
    new = fdk.parse(text)[-1]
    assert new.id is not None
    return new.id


@pytest.mark.parametrize(
    ("only", "sent"),
    [
        (None, "new"),  # no hold: the clock decides
        (["modelplane"], "old"),  # the workload gateways took only the old key so far
        (["modelplane", "modelplane-{id}"], "new"),
        (["modelplane-other"], "new"),  # nothing left: the hold is ignored
    ],
)
def test_keys_front_door_hold_sends_only_what_every_gateway_took(
    only: list[str] | None, sent: str
) -> None:
    keys = rotation()
    text = format_keys(keys)
    allowed = None if only is None else [u.replace("{id}", str(keys[1].id)) for u in only]
    held = fdk.restricted(text, allowed)
    token = front_door.basic_credentials(held, T0 + AFTER).removeprefix("Basic ")
    key = base64.b64decode(token).decode().split(":", 1)[1]
    assert {OLD: "old", keys[1].key: "new"}[key] == sent
    phase = fdk.phase(fdk.schedule(keys), T0 + AFTER, only=allowed)
    assert phase is not None
    assert phase["sent"] == ("modelplane" if sent == "old" else f"modelplane-{keys[1].id}")


def test_keys_front_door_hold_changes_the_fingerprint_only_when_it_changes_the_render() -> None:
    keys = rotation()
    schedule = {fdk.SCHEDULE_CONFIG: fdk.schedule(keys)}
    ended = T0 + GRACE

    def deploy(keep: str | None) -> object:
        return front_door_phase("ModelDeployment", {**schedule, fdk.KEEP_CONFIG: keep}, {}, ended)

    assert deploy("modelplane") != deploy(f"modelplane-{keys[1].id}") == deploy(None)
    # One key and no times: the hold renders nothing else, so no fingerprint entry at all.
    one = {fdk.SCHEDULE_CONFIG: fdk.schedule([CallerKey(OLD)])}
    assert front_door_phase("ModelDeployment", {**one, fdk.KEEP_CONFIG: "modelplane"}, {}) is None
    assert front_door_phase("InferenceGateway", {**one, fdk.ACCEPTED_CONFIG: '["x"]'}, {}) is None


class _Cache:
    def __init__(self, outputs: dict[str, dict]) -> None:
        self.outputs = outputs

    def valid(self, name: str) -> object:
        if name not in self.outputs:
            return None
        return type("Entry", (), {"masked": self.outputs[name]})()


@pytest.mark.parametrize(
    ("outputs", "hold"),
    [
        ({}, {"keep": None, "accepted": None}),  # no stack yet
        (
            {
                "gateway": {"frontDoorUser": "modelplane"},
                "deploy-demo-a": {"frontDoorUsers": ["modelplane", "modelplane-x"]},
                "deploy-demo-b": {"frontDoorUsers": ["modelplane"]},  # not run since
                "deploy-demo-c": {"endpoints": []},  # no replica behind a workload gateway
            },
            {"keep": "modelplane", "accepted": '["modelplane"]'},
        ),
        (
            {
                "gateway": {"frontDoorUser": "modelplane-x"},
                "deploy-demo-a": {"frontDoorUsers": ["modelplane-x"]},
                "deploy-demo-b": {"frontDoorUsers": ["modelplane", "modelplane-x"]},
            },
            {"keep": "modelplane-x", "accepted": '["modelplane-x"]'},
        ),
    ],
    ids=["new-fleet", "one-deployment-behind", "switched"],
)
def test_keys_front_door_hold_read_from_the_last_outputs(
    outputs: dict[str, dict], hold: dict[str, str | None]
) -> None:
    from types import SimpleNamespace

    from modelplane.driver.operations import front_door_hold

    units = [
        SimpleNamespace(kind="InferenceGateway", name="gateway"),
        *(SimpleNamespace(kind="ModelDeployment", name=f"deploy-demo-{n}") for n in "abc"),
    ]
    ctx = SimpleNamespace(cache=_Cache(outputs), existing=set(outputs), masked={})
    assert front_door_hold(ctx, units) == hold  # type: ignore[arg-type]
