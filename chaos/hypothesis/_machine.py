"""``ChaosMachine``: a Hypothesis rule-based state machine whose steps are faults on a live run.

::

    Hypothesis (the test's thread)              the floor's trio loop (chaos.floor, a thread)
      machine = PaymentsMachine()   ─────────►  open_live_run: services up, workload starts
      state.redeliver(subject='orders', count=1) ─► LiveRun.inject: applied now, recorded
      state.wait_messages(n=3)      ─────────►  until 3 more deliveries (the workload goes on)
      invariants after every step   ─────────►  async ones run on the loop; they read the
                                                history so far, or the stores as they are now
      state.teardown()              ─────────►  finish: workload ends, settle, final state,
                                                verdicts, the trace (schedule = the steps)

Why a portal (``ground._portal``: the loop in a thread of its own, each step a
``trio.from_thread.run`` call) and not a copy of Hypothesis's ``stateful.py`` (hypothesis-trio
copied it and fell behind) or guest mode (``trio.lowlevel.start_guest_run`` needs a host
event loop to hand ticks to; Hypothesis's runner is a plain loop of function calls, with
nothing to host it): the portal uses only public APIs on both sides. Hypothesis drives the
machine exactly as any other (its rule choice, shrinking, database, printing, settings);
trio runs one loop for the whole example, so the run stays alive between steps, and async
rules, invariants and teardowns are awaited on that loop (Hypothesis issue #4107 asks for
this). Rules and invariants use ``chaos.hypothesis``'s ``rule``/``invariant``/``initialize``
(Hypothesis's own, taking ``async def`` too); Hypothesis's own decorators on an ``async def``
would call it without awaiting it, so a machine defining one is refused at class creation.

A subclass names its scenario (``scenario``, ``variant``, ``space``) and gets one rule per
fault template of that space (``partition(link=..., direction=..., duration_s=...)``,
``crash(service=..., restart_after_s=...)``, ``redeliver(subject=..., count=...)``, with the
template's targets and ranges; the fault starts now, whatever trigger the template gives),
plus ``heal()`` (the last lasting fault still held), ``wait_messages(n)`` (when the space
has a subject) and ``wait_seconds(seconds)``: it only adds invariants. Every rule is always
enabled and draws Hypothesis's own strategies (``st.integers``, ``st.sampled_from``: one
choice per argument, small values first), not ``schedules``' fair bits, so that Hypothesis
can delete steps: it deletes a step only when it is a few choices long (at most five), and a
step of bit-drawn arguments is tens; a rule that is sometimes disabled (a bundle that may be
empty, a precondition) made the draw of the next rule longer and left undeletable trailing
steps (both measured).
"""

from __future__ import annotations

import functools
import glob
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import note
from hypothesis.errors import HypothesisException
from hypothesis.stateful import RuleBasedStateMachine

from chaos.floor import RunFloor, shared_floor
from chaos.hypothesis._live import Fault, LiveRun, open_live_run
from chaos.hypothesis._rules import fault_rules, integers, seconds
from chaos.hypothesis._steps import async_teardown, is_async, refuse_unawaited, rule
from chaos.hypothesis._strategy import resolve_space
from chaos.run import RunOptions
from chaos.scenario import Scenario
from chaos.testing import ChaosRun
from faults.kinds import TARGET_KIND, FaultKind
from faults.space import FaultSpace
from ground._portal import Held
from ground.errors import ConfigError

#: The failure of each machine class's step sequence, once seen (``teardown``): a final
#: violation's message or a step's exception, and that run's reproduction (its trace).
_witnesses: dict[tuple[type, tuple[tuple[Any, ...], ...]], tuple[str | Exception, str]] = {}

#: How many messages ``wait_messages`` waits for, and seconds ``wait_seconds`` waits.
WAIT_MESSAGES = (1, 10)
WAIT_SECONDS = (0.05, 0.5)


# -- the machine ------------------------------------------------------------------------------


class ChaosMachine(RuleBasedStateMachine):
    """A live run of ``scenario``'s ``variant`` per example; its rules inject faults now.

    Subclass it with the scenario, add invariants (``chaos.hypothesis.invariant``, sync or
    async), and run it with ``MyMachine.TestCase`` (a unittest/pytest test) or
    ``run_state_machine_as_test``. Teardown finishes the run (the workload ends, the system
    settles) and fails the example when an invariant of ``final_invariants`` (default: all)
    is violated; the trace of a failing example is kept in ``trace_dir`` and its ``chaos
    replay`` command is noted in the report.
    """

    #: The scenario: a built-in id, a pack folder, or a ``Scenario``.
    scenario: ClassVar[str | Path | Scenario | None] = None
    variant: ClassVar[str] = "golden"
    #: Where the fault rules come from: the variant's own table, or the pack's golden one.
    space: ClassVar[str] = "variant"
    #: The run seed (the workload's own randomness); the same in every example.
    seed: ClassVar[int] = 0
    #: Invariants whose final verdict teardown checks (None: every one the scenario has).
    final_invariants: ClassVar[tuple[str, ...] | None] = None
    #: Where the traces of failing examples are kept (passing examples leave none).
    trace_dir: ClassVar[str | Path] = Path("traces") / "hypothesis"
    #: The floor the runs go to (None: the process's shared one, ``chaos.floor``).
    floor: ClassVar[RunFloor | None] = None

    _spaces: ClassVar[dict[type, tuple[Scenario, FaultSpace]]] = {}
    _numbers: ClassVar[dict[type, Iterator[int]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        refuse_unawaited(cls)
        if "teardown" in cls.__dict__ and is_async(cls.__dict__["teardown"]):
            cls.teardown = async_teardown(cls.__dict__["teardown"], ChaosMachine.teardown)  # type: ignore[method-assign,assignment]
        if cls.scenario is None:
            return
        scenario, space = resolve_space(cls.scenario, cls.variant, cls.space)
        assert scenario is not None
        cls._spaces[cls] = (scenario, space)
        inherited = {
            name for name in dir(cls) if getattr(getattr(cls, name), "_chaos_fault_rule", False)
        }
        for name in inherited:  # a machine of another space above: its rules are not this one's
            setattr(cls, name, None)
        if not space.subjects:  # nothing to count messages on
            cls.wait_messages = None  # type: ignore[assignment]
        for name, function in fault_rules(space):
            if getattr(cls, name, None) is None:  # a rule the subclass wrote itself stays
                setattr(cls, name, function)

    def __init__(self) -> None:
        super().__init__()
        cls = type(self)
        if cls not in cls._spaces:
            raise ConfigError(f"{cls.__name__}: set scenario = ... (a built-in id or a folder)")
        self.pack, self.fault_space = cls._spaces[cls]
        #: The finished run (after teardown).
        self.run: ChaosRun | None = None
        self._floor = cls.floor or shared_floor()
        self.portal = self._floor.portal
        self.live = LiveRun(self.fault_space, cls.seed, read_state=self.pack.final_state)
        self._held: Held[LiveRun] | None = None
        #: This example's trace (once its run started).
        self.trace: Path | None = None
        #: The first failure of a step (rule or invariant), raised from teardown, and what
        #: the report says of it.
        self._failure: Exception | None = None
        self._failed_at = ""

    def _started(self) -> LiveRun:
        """The live run, started at the first step that needs it (an example Hypothesis
        throws away before its first step costs no run)."""
        if self._held is None:
            cls = type(self)
            if cls not in cls._numbers:
                cls._numbers[cls] = itertools.count(_first_free(Path(cls.trace_dir), cls.__name__))
            number = next(cls._numbers[cls])
            self.trace = Path(cls.trace_dir) / f"{cls.__name__}-{number}.trace"
            options = RunOptions(self.pack, cls.seed, variant=cls.variant, out=self.trace)
            self._held = self.portal.enter(open_live_run(self._floor.run_async, options, self.live))
        return self.live

    # -- steps (from rules) -----------------------------------------------------------------

    def inject(
        self, kind: str | FaultKind, target: str | None = None, *, duration_s: float | None = None,
        **params: Any,
    ) -> Fault:  # fmt: skip
        """Apply a fault now (``target`` may be left out when the space has one of its
        type); it lasts ``duration_s`` (None: until the workload ends)."""
        fault_kind = FaultKind(kind) if kind in {k.value for k in FaultKind} else kind
        name = target or self._only_target(fault_kind)
        inject = functools.partial(self._started().inject, duration_s=duration_s, params=params)
        return self.portal.run(inject, fault_kind, name)

    def _only_target(self, kind: str | FaultKind) -> str:
        if not isinstance(kind, FaultKind):
            return ""  # the inject step names the unknown kind
        declared = self.fault_space.declared(TARGET_KIND[kind])
        if len(declared) != 1:
            raise ConfigError(
                f"{kind.value} needs a target: the space has {len(declared)} "
                f"{TARGET_KIND[kind].value}s ({', '.join(declared) or 'none'})"
            )
        return declared[0]

    @rule()
    def heal(self, fault: Fault | None = None) -> None:
        """End a lasting fault now: ``fault``, or the last one injected that still holds (as
        a rule: "partition a link, heal it"; nothing when none holds)."""
        self.portal.run(self._started().heal, fault)

    @rule(n=integers(*WAIT_MESSAGES))
    def wait_messages(self, n: int) -> None:
        """Let the workload deliver ``n`` more messages (faults next start on the last)."""
        self.portal.run(self._started().wait_messages, n)

    @rule(seconds=seconds(*WAIT_SECONDS))
    def wait_seconds(self, seconds: float) -> None:
        """Let the workload run ``seconds``."""
        self.portal.run(self._started().wait_seconds, seconds)

    # -- what invariants read ---------------------------------------------------------------

    @property
    def history(self) -> list[dict[str, Any]]:
        """The run's history so far (Jepsen-style operations, docs/trace-format.md); empty
        before the first step."""
        if self._held is None:
            return []
        return self.portal.run_sync(self.live.history)

    def ops(
        self, f: str | None = None, *, process: str | None = None, type: str | None = None
    ) -> list[dict[str, Any]]:
        """The operations so far with this ``f``, ``process`` and ``type`` (None: any)."""
        wanted = {"f": f, "process": process, "type": type}
        return [
            op
            for op in self.history
            if all(value is None or op.get(key) == value for key, value in wanted.items())
        ]

    def state(self) -> dict[str, Any]:
        """The scenario's final state, read now (what the stores hold so far)."""
        return self.portal.run(self._started().state)

    def side_effect_count(self, name: str) -> int:
        """The most often side effect ``name`` happened so far for any one key."""
        counts = self.pack.side_effects(name, self.state())
        return max(counts.values(), default=0)

    # -- the end of an example --------------------------------------------------------------

    async def finished(self) -> ChaosRun:
        """(async, on the loop) The run, finished: settled, its final state checked."""
        if self._held is None:
            raise ConfigError("no run to finish: it starts at the machine's first step")
        if self.run is None:
            self.run = ChaosRun(self.pack, await self.live.finish())
        return self.run

    def _defer(self, failure: BaseException, step: str) -> bool:
        """Keep the first failure of a step for teardown (``chaos.hypothesis._steps``);
        Hypothesis's own ways of ending an example are not failures: raised now."""
        if not isinstance(failure, Exception) or _control_flow(failure):
            return False
        if self._failure is None:
            self._failure = failure
            self._failed_at = (
                f"chaos: {step} failed after {len(self.live.steps)} step(s) on the run "
                f"({type(failure).__name__}: {str(failure).splitlines()[0]}); raised at teardown\n"
            )
        return True

    def teardown(self) -> None:
        """Finish the run and fail the example: with the first failure of a step (kept by
        ``_defer``), else on a violated final invariant; keep the trace of a failing example
        and note its replay. An example Hypothesis itself gave up on (an invalid draw) stops
        its run at once.

        A real run is not always the same twice, and Hypothesis needs the same steps to fail
        the same way (it runs the failing example again to report it): the failure seen
        first for a sequence of steps is remembered, with its run, and the same steps fail
        again with it even when their new run held or failed otherwise (the report says so
        and names the remembered run's trace), as ``chaos search`` keeps its first violating
        run as the witness."""
        error = sys.exc_info()[1]
        if error is not None and _control_flow(error):
            self._abort()
            return
        self._started()
        try:
            run = self.portal.run(self.finished)
        except Exception as exc:
            if error is None and self._failure is None:
                raise
            note(f"chaos: the run ended on an error too: {type(exc).__name__}: {exc}")
            if error is not None:
                return
            raise self._failure from None  # type: ignore[misc]
        finally:
            assert self._held is not None
            self._held.exit()
        wanted = type(self).final_invariants
        violated = [v for v in run.violated if wanted is None or v.name in wanted]
        failure: str | Exception | None = self._failure
        if failure is None and violated:
            lines = [f"{v.name} VIOLATED: {v.explanation}" for v in violated]
            failure = "\n".join([*lines, f"replay: chaos replay {run.trace}"])
        steps = (type(self), tuple(self.live.steps))
        ran = f"{self._failed_at}chaos: {self.pack.id} {run.result.variant} run\n" + (
            run.reproduction()
        )
        if steps not in _witnesses:
            if error is None and failure is None:
                _remove_trace(run.trace)
                return
            if failure is not None:
                _witnesses[steps] = (failure, ran)
        if error is not None:
            note(ran)
            return
        witness, witness_ran = _witnesses[steps]
        if failure is not None and _same_kind(failure, witness):
            witness = failure  # this run failed as the first one did: its own run is shown
            note(ran)
        else:  # the first run of these steps is the one to replay
            how = "held" if failure is None else "failed otherwise"
            note(f"{witness_ran}\n(an earlier run of these same steps; this one {how}: "
                 f"{run.trace})")  # fmt: skip
            if isinstance(witness, str):
                witness = f"{witness}\n(an earlier run of these same steps; this one {how}: " + (
                    f"{run.trace})"
                )
        if isinstance(witness, Exception):
            raise witness
        raise AssertionError(witness)  # one place: Hypothesis tells failures apart by it

    def _abort(self) -> None:
        if self._held is None:
            return
        self.portal.run(self.live.abort)
        self._held.exit()
        if self.trace is not None:
            _remove_trace(self.trace)


def _control_flow(error: BaseException) -> bool:
    """Hypothesis's own ways of ending an example (an invalid draw, the end of its data),
    or an interruption: not a failure of the system under test."""
    return not isinstance(error, Exception) or isinstance(error, HypothesisException)


def _same_kind(failure: str | Exception, witness: str | Exception) -> bool:
    """Two failures Hypothesis takes for the same: final violations (raised at one place),
    or exceptions of one type."""
    if isinstance(failure, str) or isinstance(witness, str):
        return isinstance(failure, str) and isinstance(witness, str)
    return type(failure) is type(witness)


def _first_free(folder: Path, name: str) -> int:
    """The number after the highest ``NAME-N.trace`` (or ``.partial``) already in ``folder``:
    a pytest session numbered from 1 again wrote over, then removed, the failing traces an
    earlier session kept (a passing example removes its own)."""
    numbers = [0]
    for path in folder.glob(f"{glob.escape(name)}-*.trace*"):
        number = path.name[len(name) + 1 :].split(".", 1)[0]
        if number.isdigit():
            numbers.append(int(number))
    return max(numbers) + 1


def _remove_trace(trace: Path) -> None:
    for path in (trace, trace.with_name(trace.name + ".partial")):
        path.unlink(missing_ok=True)


__all__ = ["ChaosMachine"]
