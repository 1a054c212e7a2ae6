"""render_report on hand-written traces: what the page shows, shared axis, caps, no fetches."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ground.errors import ConfigError
from replay.report import render_report
from replay.trace import TraceWriter, read_trace
from tests.replay.report.samples import HEADER, S, ev, write_payments


class Tags(HTMLParser):
    """Every start tag with its attributes, and the page's text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    tags.close()
    return tags


def classes(tags: Tags, tag: str) -> list[str]:
    return [attrs.get("class") or "" for name, attrs in tags.tags if name == tag]


@pytest.fixture
def violated(tmp_path: Path) -> str:
    trace = read_trace(write_payments(tmp_path / "v.trace"))
    return render_report([trace], ["original: v.trace"])


def test_header_verdicts_and_evidence(violated: str) -> None:
    text = " ".join(parse(violated).text)
    assert violated.startswith("<!DOCTYPE html>")
    for shown in ("payments", "no-idempotency", "trio 0.35.0", "sha256:abc", "complete"):
        assert shown in text
    assert "violated (exit code 1, wall 3.200s)" in text
    assert '<tr class="verdict violated"><td class="name">exactly_once</td>' in violated
    assert '<span class="badge violated">VIOLATED</span>' in violated
    assert '<tr class="verdict held"><td class="name">no_lost_messages</td>' in violated
    assert "1 of 12 orders charged more than once: o-005 (x2)" in text
    # the violated verdict's evidence is open and names o-005, marked as an op it matches
    assert '<div class="evidence"><b>evidence</b>' in violated
    assert "<mark>o-005</mark>" in violated
    assert '<details class="evidence"><summary>evidence</summary>' in violated  # the held one


def test_timeline_lanes_and_fault_bars(violated: str) -> None:
    tags = parse(violated)
    assert len(classes(tags, "svg")) == 1
    text = " ".join(tags.text)
    for lane in ("subject:orders", "link:consumer-gateway", "link:producer-nats", "gateway",
                 "consumer", "producer (12 ops)", "consumer (13 ops)", "effects"):  # fmt: skip
        assert lane in text
    assert "redeliver f0 +1.000s → +3.000s" in text
    assert "partition f1 +1.200s → +1.800s" in text
    assert "latency f2 not triggered" in text
    fault_groups = classes(tags, "g")
    assert "fault k-redeliver" in fault_groups
    assert "fault k-partition" in fault_groups
    assert "mk not-triggered" in fault_groups
    assert {"mk start", "mk exit", "mk killed", "mk dropped", "mk redelivered"} <= set(fault_groups)
    ops = classes(tags, "rect")
    assert ops.count("op ok") == 12 + 13 - 3  # o-005: one publish, two charges, all hits
    assert ops.count("op ok hit") == 3
    for phase in ("workload start", "workload end", "settle"):
        assert phase in text


def test_never_healed_and_instant_faults(tmp_path: Path) -> None:
    path = write_payments(
        tmp_path / "t.trace",
        extra=[
            ev(
                2.0,
                "nemesis",
                "info",
                "reset_peer",
                {"phase": "apply", "fault_id": "f9", "target": "link:a-b"},
            ),
            ev(2.2, "nemesis", "info", "kill", {"service": "consumer"}),
            ev(2.3, "service:consumer", "info", "exit", {"code": 1, "expected": False}),
        ],
    )
    page = render_report([read_trace(path)], ["t"])
    text = " ".join(parse(page).text)
    assert "reset_peer f9 +2.000s → never healed" in text
    assert "fault k-reset_peer open" in classes(parse(page), "g")
    assert "mk instant" in classes(parse(page), "g")  # the phase-less "kill"
    assert "CRASH exit 1" in text


def test_no_external_references(violated: str) -> None:
    tags = parse(violated)
    names = {name for name, _ in tags.tags}
    assert not names & {"script", "link", "img", "iframe", "object", "embed", "image", "use"}
    for _, attrs in tags.tags:
        assert "src" not in attrs
        href = attrs.get("href")
        assert href is None or re.fullmatch(r"#trace-\d+", href)
    lowered = violated.lower()
    for needle in ("http://", "https://", "url(", "@import", "@font-face", "<link", "<script"):
        assert needle not in lowered


def test_trace_content_is_escaped(tmp_path: Path) -> None:
    evil = "<script>alert('x')</script> & \"q\""
    header = {**HEADER, "scenario_id": evil, "variant": "a&b"}
    path = write_payments(
        tmp_path / "evil.trace",
        header=header,
        extra=[
            ev(1.3, "consumer", "invoke", "charge", evil),
            ev(1.31, "consumer", "fail", "charge", evil, error="</td></tr><b>boom</b>"),
            ev(1.4, f"service:{evil}", "info", "start", {"pid": evil}),
            ev(
                1.5,
                "nemesis",
                "info",
                "partition",
                {"phase": "apply", "fault_id": evil, "target": evil},
            ),
        ],
    )
    trace = read_trace(path)
    trace.verdicts.append(
        {"name": evil, "valid": False, "explanation": evil, "evidence": {evil: [evil]}}
    )
    page = render_report([trace], [f"original {evil}"])
    tags = parse(page)
    assert "script" not in {name for name, _ in tags.tags}
    assert "<b>boom</b>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;q&quot;" in page
    assert "a&amp;b" in page
    assert "a&b" not in page
    assert evil in " ".join(tags.text)  # shown as text, exactly


def test_hostile_field_types_do_not_break_the_page(tmp_path: Path) -> None:
    trace = read_trace(write_payments(tmp_path / "h.trace"))
    trace.events += [
        {"time_ns": "soon", "process": None, "type": '"><svg onload=alert(1)>', "f": 3},
        {"time_ns": True, "process": "nemesis", "type": "info", "f": "x", "value": [1, b"\x00"]},
        {"process": "consumer", "type": "ok", "f": "charge", "value": {"k": "\x00\x1b[31m"}},
    ]
    trace.verdicts.append({"name": 5, "valid": "<maybe>", "evidence": [[[[[[["deep"]]]]]]]})
    trace.schedule = {"events": [{"id": {"nested": True}}, "not a map"]}
    page = render_report([trace], ["h\x1b[0m"])
    tags = parse(page)
    assert all(not key.startswith("on") for _, attrs in tags.tags for key in attrs)
    assert "\x00" not in page
    assert "\x1b" not in page
    assert "\\u001b[31m" in page  # op values are shown JSON-quoted
    assert "h\\x1b[0m" in page  # other text shows control characters as escapes


def test_partial_traces_say_so(tmp_path: Path) -> None:
    killed = read_trace(write_payments(tmp_path / "k.trace", end=False))
    page = render_report([killed], ["k"])
    assert '<p class="banner">PARTIAL: no end frame (the run was killed)' in page
    assert "unknown (partial trace)" in page
    data = (tmp_path / "k.trace").read_bytes()
    (tmp_path / "cut.trace").write_bytes(data[:-7])
    page = render_report([read_trace(tmp_path / "cut.trace")], ["cut"])
    assert "PARTIAL: cut off mid-frame after" in page


def test_original_and_replays_share_one_axis(tmp_path: Path) -> None:
    original = read_trace(write_payments(tmp_path / "o.trace"))
    short = read_trace(write_payments(tmp_path / "r.trace", violated=False))
    short.events = [e for e in short.events if e["time_ns"] < 2 * 10**9]
    page = render_report([original, short], ["original", "replay 1"])
    svgs = re.findall(r"<svg .*?</svg>", page)
    assert len(svgs) == 2
    axes = [re.findall(r'class="ticklabel" x="([\d.]+)" y="[\d.]+">([\d.]+s)<', s) for s in svgs]
    assert axes[0] == axes[1]
    assert axes[0][-1][1] == "3.0s"  # the axis covers the longer run
    # side by side: one column per trace, the replay's differing cells marked
    compare = page[page.index('<table class="compare">') : page.index("</table>")]
    assert '<a href="#trace-0">original</a>' in compare
    assert '<a href="#trace-1">replay 1</a>' in compare
    row = re.search(r"<tr><th>exactly_once</th>(.*?)</tr>", compare)
    assert row is not None
    assert "VIOLATED" in row.group(1)
    assert '<td class="diff"><span class="badge held">held</span></td>' in row.group(1)
    faults = re.findall(r"<tr><th>fault (f\d)</th><td[^>]*>(.*?)</td>", compare)
    assert faults == [
        ("f0", "redeliver +1.000s → +3.000s"),
        ("f1", "partition +1.200s → +1.800s"),
        ("f2", '<span class="dim">latency f2 not triggered</span>'),
    ]
    assert 'id="trace-0"' in page
    assert 'id="trace-1"' in page


def test_long_op_lists_are_capped(tmp_path: Path) -> None:
    with TraceWriter(tmp_path / "big.trace", HEADER) as writer:
        for n in range(500):
            writer.write_event(ev(n / 100, "worker", "invoke", "put", f"k{n}"))
            writer.write_event(ev(n / 100 + 0.001, "worker", "ok", "put", f"k{n}"))
        writer.write_verdict({"name": "v", "valid": False, "evidence": {"bad": ["k450"]}})
        writer.write_end("violated", 1, 5.0)
    page = render_report([read_trace(tmp_path / "big.trace")], ["big"], ops_per_process=40)
    assert "worker (500 ops, 99 not drawn)" in page  # 400 drawn plus the evidence hit k450
    assert "… 459 more ops not shown" in page  # 40 rows plus the hit
    assert page.count('<tr class="ok hit">') == 1
    assert len(page) < 400_000


def test_same_input_same_page(tmp_path: Path) -> None:
    trace = read_trace(write_payments(tmp_path / "v.trace"))
    assert render_report([trace], ["a"]) == render_report([trace], ["a"])


def test_bad_arguments(tmp_path: Path) -> None:
    trace = read_trace(write_payments(tmp_path / "v.trace"))
    with pytest.raises(ConfigError, match="at least one trace"):
        render_report([], [])
    with pytest.raises(ConfigError, match="got 1 traces but 2 titles"):
        render_report([trace], ["a", "b"])
    with pytest.raises(ConfigError, match="ops_per_process must be >= 0, got -1"):
        render_report([trace], ["a"], ops_per_process=-1)


def test_ops_pair_each_completion_with_its_invoke() -> None:
    from replay.report._ops import pair_ops

    events = [
        ev(1.0, "consumer", "invoke", "charge", "o-8"),  # lost: the consumer was killed
        ev(2.0, "consumer", "invoke", "charge", "o-8"),  # redelivered after the restart
        ev(2.1, "consumer", "ok", "charge", "o-8"),
        ev(2.2, "consumer", "invoke", "charge", "o-9"),
        ev(2.3, "consumer", "fail", "charge", "o-9", error="timeout"),
        ev(2.4, "consumer", "info", "refund", "o-1"),  # a completion with no invoke
    ]
    ops = pair_ops(events, frozenset({"o-9"}))["consumer"]
    seen = [(op.value, op.start_ns, op.end_ns, op.result, op.hit) for op in ops]
    assert seen == [
        ("o-8", 1 * S, None, "pending", False),
        ("o-8", 2 * S, int(2.1 * S), "ok", False),
        ("o-9", int(2.2 * S), int(2.3 * S), "fail", True),
        ("o-1", None, int(2.4 * S), "info", False),
    ]
    assert ops[2].error == "timeout"
