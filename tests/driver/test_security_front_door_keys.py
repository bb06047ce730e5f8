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

from components.workload import front_door
from modelplane import front_door_keys as fdk
from modelplane.caller_keys import CallerKey, KeyFormatError, format_keys, rfc3339
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
    text = fdk.schedule(keys)
    assert all(k.key not in text for k in keys)
    assert [r["id"] for r in json.loads(text)] == [None, keys[1].id]


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
