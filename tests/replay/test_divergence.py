"""First divergence on hand-written histories: what counts, what is noise, which comes first."""

from __future__ import annotations

from typing import Any

from replay.divergence import first_divergence, stream_divergences
from replay.logical import ack_subject, logical

ACK = "$JS.ACK.ORDERS.charger.1.10.10.1795951777146411440.0"


def history(*rows: tuple[Any, ...], t0: int = 0) -> list[dict[str, Any]]:
    """Events from (ms, process, type, f, value[, extra]) rows, indexed in order."""
    events = []
    for index, (ms, process, kind, f, value, *extra) in enumerate(rows):
        event = {"index": index, "time_ns": t0 + ms * 1_000_000, "process": process}
        event.update(type=kind, f=f, value=value, error=None, **(extra[0] if extra else {}))
        events.append(event)
    return events


def nemesis(phase: str, fault: str = "f0") -> dict[str, Any]:
    return {"phase": phase, "fault_id": fault, "target": "subject:orders", "count": 2}


def delivery(n: int) -> dict[str, Any]:
    return {"proxy": "consumer-nats", "conn": 0, "subject": "orders.new", "delivery": n}


BASE: list[tuple[Any, ...]] = [
    (0, "harness", "info", "workload", {"phase": "start"}),
    (10, "producer", "invoke", "publish", "o-1"),
    (11, "producer", "ok", "publish", "o-1"),
    (12, "proxy", "info", "nats_delivery", delivery(1)),
    (13, "consumer", "invoke", "charge", "o-1", {"delivery": 1}),
    (14, "nemesis", "info", "redeliver", nemesis("apply")),
    (15, "consumer", "ok", "charge", "o-1", {"delivery": 1}),
    (16, "proxy", "info", "frame_dropped", {"proxy": "consumer-nats", "op": "ack", "subject": ACK}),
    (20, "producer", "invoke", "publish", "o-2"),
    (21, "producer", "ok", "publish", "o-2"),
    (22, "proxy", "info", "nats_delivery", delivery(1)),
    (23, "consumer", "invoke", "charge", "o-2", {"delivery": 1}),
    (25, "consumer", "ok", "charge", "o-2", {"delivery": 1}),
    (40, "proxy", "info", "nats_delivery", delivery(2)),
    (41, "consumer", "invoke", "charge", "o-1", {"delivery": 2}),
    (42, "consumer", "ok", "charge", "o-1", {"delivery": 2}),
    (50, "harness", "info", "settle", {"settled": True}),
    (51, "nemesis", "info", "redeliver", nemesis("heal")),
]


def test_identical_histories_do_not_diverge() -> None:
    assert first_divergence(history(*BASE), history(*BASE)) is None


def test_reordering_across_processes_is_not_a_divergence() -> None:
    rows = list(BASE)
    # the consumer's charge of o-1 now finishes after the producer's publish of o-2,
    # and the fault lands before the delivery: different interleaving, same per-stream order
    rows[6], rows[8], rows[9] = rows[8], rows[9], rows[6]
    rows[3], rows[5] = rows[5], rows[3]
    assert first_divergence(history(*BASE), history(*rows, t0=5_000_000)) is None


def test_reordering_within_a_process_is_a_divergence() -> None:
    rows = list(BASE)
    rows[12], rows[15] = rows[15], rows[12]  # consumer: ok o-2 and ok o-1 swap
    found = first_divergence(history(*BASE), history(*rows))
    assert found is not None
    assert found.stream == "consumer"
    assert found.expected is not None
    assert found.actual is not None
    assert (found.expected["value"], found.actual["value"]) == ("o-2", "o-1")


def test_times_pids_ports_logs_and_connections_are_noise() -> None:
    noisy = [
        (1, "service:consumer", "info", "start", {"pid": 4242}),
        (2, "service:consumer", "info", "log", "listening on 127.0.0.1:45939"),
        (3, "proxy", "info", "connection_opened", {"proxy": "consumer-nats", "conn": 0}),
        (4, "proxy", "info", "draw", {"proxy": "consumer-nats", "value": 0.123}),
    ]
    other = [
        (7, "service:consumer", "info", "start", {"pid": 99}),
        (8, "service:consumer", "info", "log", "listening on 127.0.0.1:50001"),
        (9, "proxy", "info", "connection_opened", {"proxy": "consumer-nats", "conn": 3}),
    ]
    later_ack = ACK.replace("1795951777146411440.0", "1795951999999999999.4")
    shifted = [
        (ms * 2, p, k, f, {**v, "subject": later_ack} if f == "frame_dropped" else v, *x)
        for ms, p, k, f, v, *x in BASE
    ]
    assert first_divergence(history(*noisy, *BASE), history(*other, *shifted)) is None


def test_a_missing_op_is_found_where_it_went_missing() -> None:
    rows = [r for r in BASE if not (r[1] == "consumer" and r[2] == "ok" and r[4] == "o-2")]
    found = first_divergence(history(*BASE), history(*rows))
    assert found is not None
    assert found.stream == "consumer"
    assert found.position == 3
    assert found.expected is not None
    assert found.expected["index"] == 12
    assert found.expected["type"] == "ok"
    assert found.expected["value"] == "o-2"
    assert found.actual is not None
    assert found.actual["value"] == "o-1"


def test_a_different_value_is_expected_vs_actual() -> None:
    rows = list(BASE)
    rows[1] = (10, "producer", "invoke", "publish", "o-9")
    found = first_divergence(history(*BASE), history(*rows))
    assert found is not None
    assert found.stream == "producer"
    assert found.position == 0
    assert found.expected is not None
    assert found.expected["value"] == "o-1"
    assert found.actual is not None
    assert found.actual["value"] == "o-9"
    assert found.time_ns == 10_000_000
    assert found.index == 1


def test_a_missing_fault_apply_is_a_divergence_of_that_fault() -> None:
    rows = [r for r in BASE if r[1] != "nemesis"]
    rows.append((51, "nemesis", "info", "redeliver", nemesis("not_triggered")))
    found = first_divergence(history(*BASE), history(*rows))
    assert found is not None
    assert found.stream == "nemesis f0"
    assert found.expected is not None
    assert found.expected["value"]["phase"] == "apply"
    assert found.actual is not None
    assert found.actual["value"]["phase"] == "not_triggered"


def test_a_replay_that_stops_early_has_nothing_where_the_recording_goes_on() -> None:
    found = first_divergence(history(*BASE), history(*BASE[:14]))
    assert found is not None
    assert found.stream == "consumer"
    assert found.actual is None
    assert found.expected is not None
    assert found.expected["value"] == "o-1"
    assert "nothing" in found.describe()


def test_the_earliest_divergence_in_time_comes_first() -> None:
    rows = list(BASE)
    rows[13] = (40, "proxy", "info", "nats_delivery", delivery(3))  # late, proxy stream
    rows[1] = (10, "producer", "invoke", "publish", "o-9")  # early, producer stream
    found = stream_divergences(history(*BASE), history(*rows))
    assert [d.stream for d in found] == ["producer", "proxy consumer-nats nats_delivery"]
    assert first_divergence(history(*BASE), history(*rows)) == found[0]


def test_times_count_from_each_runs_workload_start() -> None:
    rows = list(BASE)
    rows[13] = (40, "proxy", "info", "nats_delivery", delivery(3))  # 40 ms into the workload
    rows.append((30, "nemesis", "info", "redeliver", nemesis("apply", "f1")))  # only here
    late = history(*rows, t0=900_000_000)  # the replay's setup took 0.9 s longer
    found = stream_divergences(history(*BASE), late)
    assert [(d.stream, d.offset_ns) for d in found] == [
        ("nemesis f1", 30_000_000),
        ("proxy consumer-nats nats_delivery", 40_000_000),
    ]
    assert found[0].expected is None
    assert found[0].time_ns == 930_000_000


def test_a_divergence_as_json_names_both_sides() -> None:
    rows = list(BASE)
    rows[1] = (10, "producer", "invoke", "publish", "o-9")
    found = first_divergence(history(*BASE), history(*rows))
    assert found is not None
    data = found.to_json()
    assert data["stream"] == "producer"
    assert data["index"] == 1
    assert data["expected"]["value"] == "o-1"
    assert data["actual"]["value"] == "o-9"
    assert data["description"] == found.describe()
    assert "expected #1 " in found.describe()
    assert "o-9" in found.describe()


def test_ack_subjects_lose_their_timestamps_only() -> None:
    assert ack_subject(ACK) == "$JS.ACK.ORDERS.charger.1.10"
    v2 = "$JS.ACK.hub.ACCHASH.ORDERS.charger.2.10.31.1795951777146411440.0.tok"
    assert ack_subject(v2) == "$JS.ACK.ORDERS.charger.2.10"
    # The newer layout's random 12th token is optional: 11 tokens are an ack too.
    assert ack_subject(v2.removesuffix(".tok")) == "$JS.ACK.ORDERS.charger.2.10"
    assert ack_subject("orders.new") == "orders.new"


def test_error_texts_do_not_count_but_the_op_type_does() -> None:
    a = logical(
        {"process": "consumer", "type": "info", "f": "charge", "value": "o-1", "error": "x"}
    )
    b = logical(
        {"process": "consumer", "type": "info", "f": "charge", "value": "o-1", "error": "y"}
    )
    c = logical({"process": "consumer", "type": "ok", "f": "charge", "value": "o-1"})
    assert a is not None
    assert b is not None
    assert c is not None
    assert a.key == b.key != c.key


def test_a_cut_off_recording_is_compared_as_a_prefix() -> None:
    recorded = history(*BASE[:9])  # the run was killed after 9 events
    assert first_divergence(recorded, history(*BASE), prefix=True) is None
    found = first_divergence(recorded, history(*BASE))
    assert found is not None
    assert found.expected is None
    rows = list(BASE)
    rows[1] = (10, "producer", "invoke", "publish", "o-9")
    assert first_divergence(recorded, history(*rows), prefix=True) is not None


def test_clock_readings_in_an_ops_value_are_not_compared() -> None:
    recorded = [
        *history(*BASE),
        *history((30, "auditor", "ok", "grant", {"token": 3, "at": 1.5, "expires_at": 2.5})),
    ]
    replayed = [
        *history(*BASE),
        *history((31, "auditor", "ok", "grant", {"token": 3, "at": 9.1, "expires_at": 9.9})),
    ]
    assert first_divergence(recorded, replayed) is None


def test_the_rest_of_a_value_with_clock_readings_still_counts() -> None:
    recorded = history((30, "auditor", "ok", "grant", {"token": 3, "at": 1.5, "until": 2.0}))
    replayed = history((30, "auditor", "ok", "grant", {"token": 4, "at": 1.5, "until": 2.0}))
    found = first_divergence(recorded, replayed)
    assert found is not None
    assert found.stream == "auditor"
    assert found.expected is not None
    assert found.expected["value"]["token"] == 3
