"""The nemesis on a fake run under trio's MockClock: exact apply and heal times, every trigger,
every way a fault ends, shielded heals, and the taxonomy tables it dispatches through."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio
import trio.testing

from chaos.nemesis import APPLIERS, Nemesis, resolve_target
from chaos.nemesis.triggers import POLL_S
from faults.kinds import LAYER, TARGET_KIND, FaultKind, FaultLayer, TargetKind
from faults.model import FaultEvent
from faults.proxy.toxics import TOXIC_TYPES
from ground.errors import ConfigError, ServiceError
from tests.nemesis.fakes import FakeRun, at, fault, schedule

Script = Callable[[], Awaitable[None]]


async def play(
    run: FakeRun,
    events: Sequence[FaultEvent],
    *,
    workload_ends: float | None,
    run_ends: float,
    script: Script | None = None,
    stopped_early: bool = False,
    watch: Callable[[Nemesis], Awaitable[None]] | None = None,
) -> Nemesis:
    """Run the nemesis as ``chaos.run`` does: the workload ends at ``workload_ends`` (never,
    if None), the run cancels the nemesis at ``run_ends`` (its planned end, or a stop before
    it: Ctrl-C, an error); ``script`` plays the system; ``watch`` looks at the nemesis."""
    nemesis = Nemesis(run, schedule(*events))
    nemesis.check()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(nemesis.run)
        if script is not None:
            nursery.start_soon(script)
        if watch is not None:
            nursery.start_soon(watch, nemesis)
        if workload_ends is not None:
            await trio.sleep_until(run.workload_t0 + workload_ends)
            nemesis.workload_done.set()
        await trio.sleep_until(run.workload_t0 + run_ends)
        if not stopped_early:
            nemesis.end()
        nursery.cancel_scope.cancel()
    return nemesis


def toxics_of(run: FakeRun, link: str) -> dict[str, tuple[str, str, dict[str, Any]]]:
    return {t.name: (t.type, t.stream, t.attributes) for t in run.links[link].toxics()}


# -- triggers ---------------------------------------------------------------------------


async def test_at_time_applies_at_the_exact_offset_and_heals_at_its_duration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    seen: dict[str, Any] = {}

    async def look() -> None:
        await trio.sleep_until(1.75)
        seen.update(toxics_of(run, "db"))

    latency = fault("latency", "link:db", at(1.5), duration_s=0.5, latency_ms=100, jitter_ms=5)
    nemesis = await play(run, [latency], workload_ends=10.0, run_ends=20.0, script=look)
    assert run.recorder.phases("f0") == [(1.5, "apply"), (2.0, "heal")]
    assert seen == {"f0-downstream": ("latency", "downstream", {"latency": 100, "jitter": 5})}
    assert toxics_of(run, "db") == {}
    assert nemesis.applied == ["f0"]


async def test_on_connection_fires_on_the_nth_connection_and_unhooks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    link = run.links["db"]

    async def connect() -> None:
        for t in (1.0, 2.0, 3.0, 4.0):
            await trio.sleep_until(t)
            link.connect()

    trigger = {"type": "on_connection", "link": "db", "n": 3}
    reset = fault("reset_peer", "link:db", trigger, duration_s=0.25, timeout_ms=10)
    await play(run, [reset], workload_ends=10.0, run_ends=11.0, script=connect)
    assert run.recorder.phases("f0") == [(3.0, "apply"), (3.25, "heal")]
    assert link.hooks == []


async def test_on_connection_already_reached_fires_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    for _ in range(2):
        run.links["db"].connect()
    trigger = {"type": "on_connection", "link": "db", "n": 2}
    await play(run, [fault("slow_close", "link:db", trigger, delay_ms=5)], workload_ends=1.0,
               run_ends=2.0)  # fmt: skip
    assert run.recorder.phases("f0") == [(0.0, "apply"), (1.0, "heal")]


async def test_after_bytes_fires_within_one_poll_of_the_count(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    link = run.links["db"]

    async def traffic() -> None:
        await trio.sleep_until(0.5)
        link.bytes_total = 400
        await trio.sleep_until(1.0)
        link.bytes_total = 600

    trigger = {"type": "after_bytes", "link": "db", "n_bytes": 500}
    await play(run, [fault("bandwidth", "link:db", trigger, rate_kbps=8)], workload_ends=5.0,
               run_ends=6.0, script=traffic)  # fmt: skip
    (applied, _), healed = run.recorder.phases("f0")
    assert 1.0 <= applied <= 1.0 + POLL_S
    assert healed == (5.0, "heal")


async def test_on_message_fires_on_the_nth_delivery(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()

    async def deliver() -> None:
        for t in (0.5, 0.75, 1.25):
            await trio.sleep_until(t)
            run.deliver("orders")

    trigger = {"type": "on_message", "subject": "orders", "n": 2}
    redeliver = fault("redeliver", "subject:orders", trigger, count=3)
    await play(run, [redeliver], workload_ends=2.0, run_ends=4.0, script=deliver)
    assert run.recorder.phases("f0") == [(0.75, "apply"), (4.0, "heal")]


# -- how faults end ---------------------------------------------------------------------


async def test_a_lasting_fault_heals_when_the_workload_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    partition = fault("partition", "link:db", at(0.25), direction="both")
    longer = fault("latency", "link:db", at(0.5), id="f1", duration_s=9.0, latency_ms=1)
    await play(run, [partition, longer], workload_ends=3.0, run_ends=5.0)
    assert run.recorder.phases("f0") == [(0.25, "apply"), (3.0, "heal")]
    assert run.recorder.phases("f1") == [(0.5, "apply"), (3.0, "heal")]  # workload end first
    log = run.links["db"].toxic_log
    assert [(t, what, name) for t, what, name in log if name.startswith("f0")] == [
        (0.25, "added", "f0-upstream"),
        (0.25, "added", "f0-downstream"),
        (3.0, "removed", "f0-upstream"),
        (3.0, "removed", "f0-downstream"),
    ]


async def test_message_faults_stay_until_the_run_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    dup = fault("duplicate_publish", "subject:orders", at(0.5), count=2)
    await play(run, [dup], workload_ends=1.0, run_ends=3.0)
    assert run.recorder.phases("f0") == [(0.5, "apply"), (3.0, "heal")]
    assert run.links["producer-nats"].toxic_log == [
        (0.5, "added", "f0-upstream"),
        (3.0, "removed", "f0-upstream"),
    ]


async def test_a_crash_kills_then_restarts_after_restart_after_s_and_records_the_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    consumer = run.services["consumer"]
    crash = fault("crash", "service:consumer", at(1.0), restart_after_s=0.5)
    await play(run, [crash], workload_ends=10.0, run_ends=11.0)
    assert consumer.calls == [(1.0, "kill"), (1.6, "restart")]  # the restart takes 0.1 s
    assert run.recorder.phases("f0") == [(1.0, "apply"), (1.6, "heal")]
    (start,) = [e for e in run.recorder.events if e["process"] == "service:consumer"]
    assert start["t"] == 1.6
    assert (start["f"], start["value"]) == ("start", {"pid": 101, "restart": True})


async def test_busy_while_a_fault_is_due_on_a_timer_not_while_one_waits_for_traffic(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``busy`` (what the settle detector asks before it believes STUCK): a fault still to
    fire at a time, a crash still to restart; not a fault waiting for a message, nor a
    message fault held until the run ends."""
    run = FakeRun()
    crash = fault("crash", "service:consumer", at(1.0), restart_after_s=0.5)
    dup = fault("duplicate_publish", "subject:orders", at(0.5), id="f1", count=2)
    waiting = fault(
        "redeliver", "subject:orders", {"type": "on_message", "subject": "orders", "n": 99},
        id="f2", count=1,
    )  # fmt: skip
    seen: list[tuple[float, bool]] = []

    async def sample(nemesis: Nemesis) -> None:
        for _ in range(12):
            seen.append((trio.current_time() - run.workload_t0, nemesis.busy))
            await trio.sleep(0.25)

    await play(run, [crash, dup, waiting], workload_ends=2.0, run_ends=3.0, watch=sample)
    busy = {round(t, 2): b for t, b in seen}
    # the crash still to fire; killed, its restart due at 1.5 s and taking 0.1 s; restarted
    # (f1 held to the run's end, f2 waiting for a message that never comes)
    assert [busy[t] for t in (0.25, 0.75, 1.25, 1.5, 1.75, 2.5)] == [True] * 4 + [False] * 2


@pytest.mark.parametrize("supervised", [True, False])
async def test_a_restart_that_dies_before_ready_is_left_to_the_supervisor(
    autojump_clock: trio.testing.MockClock, supervised: bool
) -> None:
    run = FakeRun()
    consumer = run.services["consumer"]
    consumer.supervised = supervised
    consumer.restart_error = ServiceError("consumer exited with code 1 before it was ready")
    crash = fault("crash", "service:consumer", at(1.0), restart_after_s=0.5)
    if not supervised:  # unsupervised, nobody else would bring it back: the run fails
        with pytest.raises(BaseExceptionGroup) as info:
            await play(run, [crash], workload_ends=10.0, run_ends=11.0)
        assert info.value.subgroup(ServiceError) is not None
        return
    await play(run, [crash], workload_ends=10.0, run_ends=11.0)
    (failed,) = [e for e in run.recorder.events if e["process"] == "service:consumer"]
    assert failed["f"] == "restart_failed"
    assert "before it was ready" in failed["value"]["error"]


async def test_a_restart_another_crash_cut_short_is_recorded_as_interrupted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    run.services["consumer"].killed_while_starting = True
    crash = fault("crash", "service:consumer", at(1.0), restart_after_s=0.5)
    await play(run, [crash], workload_ends=10.0, run_ends=11.0)
    assert run.recorder.phases("f0") == [(1.0, "apply"), (1.6, "heal")]
    (event,) = [e for e in run.recorder.events if e["process"] == "service:consumer"]
    assert event["f"] == "restart_interrupted"  # not a start: no process of it is running


async def test_the_runs_end_heals_shielded_even_a_slow_heal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    consumer = run.services["consumer"]
    crash = fault("crash", "service:consumer", at(1.0), restart_after_s=30.0)
    pause = fault("pause", "service:plain", at(1.5), id="f1")
    await play(run, [crash, pause], workload_ends=None, run_ends=2.0)
    # The run reached its end at 2.0: the restart still ran to the end.
    assert consumer.calls == [(1.0, "kill"), (2.1, "restart")]
    assert run.recorder.phases("f0") == [(1.0, "apply"), (2.1, "heal")]
    assert run.services["plain"].calls == [(1.5, "pause"), (2.0, "resume")]
    assert run.recorder.phases("f1") == [(1.5, "apply"), (2.0, "heal")]


async def test_a_run_stopped_early_heals_but_restarts_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    consumer = run.services["consumer"]
    crash = fault("crash", "service:consumer", at(1.0), restart_after_s=30.0)
    pause = fault("pause", "service:plain", at(1.5), id="f1")
    await play(run, [crash, pause], workload_ends=None, run_ends=2.0, stopped_early=True)
    # Ctrl-C (or an error) at 2.0: the paused service resumes, the crashed one stays down
    # (the teardown stops it anyway; a restart could wait a minute for it to be ready).
    assert consumer.calls == [(1.0, "kill")]
    assert run.recorder.phases("f0") == [(1.0, "apply")]
    assert run.services["plain"].calls == [(1.5, "pause"), (2.0, "resume")]
    assert run.recorder.phases("f1") == [(1.5, "apply"), (2.0, "heal")]


async def test_a_run_stopped_early_cuts_a_restart_in_progress_short(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    consumer = run.services["consumer"]
    consumer.restart_s = 60.0  # a service that takes long to be ready again
    crash = fault("crash", "service:consumer", at(1.0), restart_after_s=0.5)
    await play(run, [crash], workload_ends=None, run_ends=2.0, stopped_early=True)
    assert consumer.calls == [(1.0, "kill")]  # the restart begun at 1.5 never finished
    assert run.recorder.phases("f0") == [(1.0, "apply")]
    assert trio.current_time() == 2.0  # the stop did not wait for it


async def test_a_fault_whose_trigger_never_came_is_recorded_as_not_triggered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    trigger = {"type": "on_connection", "link": "db", "n": 5}
    nemesis = await play(run, [fault("latency", "link:db", trigger, latency_ms=1)],
                         workload_ends=1.0, run_ends=2.0)  # fmt: skip
    assert run.recorder.phases("f0") == [(2.0, "not_triggered")]
    assert nemesis.applied == []
    assert run.links["db"].hooks == []


async def test_clock_skew_shifts_the_clock_and_sets_it_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    skew = fault("clock_skew", "service:consumer", at(0.5), duration_s=1.0, offset_s=-3600.0)
    await play(run, [skew], workload_ends=5.0, run_ends=6.0)
    faketime = run.services["consumer"].faketime
    assert faketime is not None
    assert faketime.offsets == [(0.5, -3600.0), (1.5, 0.0)]


async def test_a_service_without_a_clock_file_cannot_take_skew(
    autojump_clock: trio.testing.MockClock,
) -> None:
    run = FakeRun()
    skew = fault("clock_skew", "service:plain", at(0.0), offset_s=5.0)
    with pytest.raises(BaseExceptionGroup) as caught:
        await play(run, [skew], workload_ends=1.0, run_ends=2.0)
    assert caught.group_contains(ConfigError, match="plain cannot take clock skew", depth=2)


# -- checks and tables ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (fault("latency", "link:nope", at(0), latency_ms=1), "no link 'nope'"),
        (fault("pause", "service:nope", at(0)), "no service 'nope'"),
        (fault("redeliver", "subject:nope", at(0)), "no subject 'nope'"),
        (
            fault("pause", "service:consumer", {"type": "after_bytes", "link": "x", "n_bytes": 1}),
            "no link 'x'",
        ),
        (
            fault("pause", "service:consumer", {"type": "on_message", "subject": "y", "n": 1}),
            "no subject 'y'",
        ),
    ],
)
async def test_check_refuses_what_the_run_does_not_have(event: FaultEvent, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Nemesis(FakeRun(), schedule(event)).check()


def test_every_layer_has_an_applier_and_every_kind_its_layers() -> None:
    assert set(APPLIERS) == set(FaultLayer)
    for kind in FaultKind:
        assert kind in APPLIERS[LAYER[kind]].kinds, kind
    assert sum(len(a.kinds) for a in APPLIERS.values()) == len(FaultKind)


PARAMS: dict[FaultKind, dict[str, Any]] = {
    FaultKind.LATENCY: {"latency_ms": 100, "jitter_ms": 10},
    FaultKind.BANDWIDTH: {"rate_kbps": 64},
    FaultKind.SLOW_CLOSE: {"delay_ms": 100},
    FaultKind.CLOCK_SKEW: {"offset_s": 1.0},
}


TOXIC_LAYERS = {FaultLayer.NETWORK, FaultLayer.MESSAGE}
TARGETS = {TargetKind.LINK: "link:db", TargetKind.SUBJECT: "subject:orders"}


@pytest.mark.parametrize("kind", [k for k in FaultKind if LAYER[k] in TOXIC_LAYERS])
async def test_every_toxic_an_applier_adds_is_one_the_proxy_accepts(kind: FaultKind) -> None:
    run = FakeRun()
    event = fault(kind.value, TARGETS[TARGET_KIND[kind]], at(0), **PARAMS.get(kind, {}))
    applied = await APPLIERS[LAYER[kind]].apply(run, event, resolve_target(run, event))
    added = [t for link in run.links.values() for t in link.toxics()]
    assert added
    for toxic in added:
        assert toxic.type in TOXIC_TYPES
        TOXIC_TYPES[toxic.type].from_json(toxic.attributes)  # the proxy takes the attributes
    await applied.heal()
    assert not [t for link in run.links.values() for t in link.toxics()]
