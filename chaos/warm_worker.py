"""A warm worker's process (``python -m chaos.warm_worker``): runs on kept servers.

The worker speaks JSON lines: one request per line on stdin (``scenario``, ``variant``,
``seed``, ``out``, and optionally ``schedule``: a fault schedule as ``chaos run --schedule``
takes it, its seed the request's; or ``candidate``: a ``CandidateSpec.to_dict()``, for a
graded run as ``chaos run --impl`` makes it, the candidate started fresh in its sandbox), one
answer per line on its stdout (``exit_code``, ``verdict`` as ``chaos run --json`` prints it,
``error``, the worker's ``pid``; ``retire`` when its servers are no longer clean, or after a
graded run's harness error: it then stops them and exits, and a pool starts a fresh worker).
A run that fails is an answer (exit code 3, or 2 for bad input), never the end of the worker.
It stops its services and exits when stdin closes, and on SIGINT/SIGTERM/SIGHUP as ``chaos run``.
If it is SIGKILLed, its servers die with it (parent-death signal) and the next harness command or
``chaos gc`` removes its dir: the warm services (``chaos.warm``) are a registered run like any
other. The pool that starts workers and sends them requests is ``chaos.warm_pool``.

A scenario that lists modules in ``Scenario.zygote_preload`` gets a zygote in the worker
(``chaos.services.zygote``): its own Python services are forked from a pre-imported
interpreter instead of exec'd (``CHAOS_ZYGOTE=0``: exec'd).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from chaos.run import RunOptions, run_scenario
from chaos.sandbox.candidate import CandidateSpec
from chaos.sandbox.graded import make_candidate, run_graded
from chaos.scenario import load_scenario
from chaos.schedule_file import check_schedule_targets
from chaos.services import open_run_dir, zygote
from chaos.warm import WarmServices, open_warm_services
from faults.model import FaultSchedule
from ground import _signals
from ground.errors import EXIT_BAD_INPUT, EXIT_HARNESS, ChaosError, ConfigError, ServiceError


async def run_one(
    request: Mapping[str, Any], warm: WarmServices | None, scenarios: dict[str, Any]
) -> dict[str, Any]:
    """One run in this process; the answer a worker prints (``exit_code``, ``verdict``,
    ``error``, ``wall_s``). The per-run entry point of a warm worker: ``chaos sweep`` and
    other dispatchers call it through ``WarmWorker.run``."""
    started = time.monotonic()
    try:
        name, seed = str(request["scenario"]), int(request["seed"])
        variant = str(request.get("variant", "golden"))
        out = Path(request["out"]) if request.get("out") else None
        timeout = request.get("settle_timeout_s")
        settle_timeout_s = None if timeout is None else float(timeout)
        raw_schedule = request.get("schedule")
        if raw_schedule is not None and not isinstance(raw_schedule, dict):
            raise TypeError(f"schedule must be an object, got {type(raw_schedule).__name__}")
        raw_candidate = request.get("candidate")
        spec = None if raw_candidate is None else CandidateSpec.from_dict(raw_candidate)
    except ConfigError as exc:
        return _answer(EXIT_BAD_INPUT, None, str(exc), started)
    except (KeyError, ValueError, TypeError) as exc:
        return _answer(EXIT_BAD_INPUT, None, f"bad request: {exc!r}", started)
    try:
        if name not in scenarios:
            scenarios[name] = load_scenario(name)
        scenario = scenarios[name]
        schedule = None
        if raw_schedule is not None:  # as ``chaos run --schedule`` reads and checks it
            schedule = FaultSchedule.from_dict(raw_schedule)
            check_schedule_targets(scenario, variant, schedule)
            if schedule.seed != seed:
                raise ConfigError(f"the schedule's seed {schedule.seed} is not the seed {seed}")
        use_warm = warm if getattr(scenario, "warm_services", False) else None
        if use_warm is not None:
            try:
                await use_warm.check_clean()
            except ServiceError as exc:  # this worker's servers are of no more use
                return {**_failed(exc, started), "retire": True}
        options = RunOptions(
            scenario,
            seed,
            variant=variant,
            out=out,
            settle_timeout_s=settle_timeout_s,
            warm=use_warm,
            schedule=schedule,
        )
        if spec is not None:  # a graded run, as ``chaos run --impl`` does it
            if schedule is not None:
                raise ConfigError("a graded run draws its faults: no schedule goes with it")
            options.candidate = make_candidate(
                scenario, spec.program, limits=spec.limits, isolation=spec.isolation,
                hidden=spec.hidden, sandbox_kind=spec.sandbox,
            )  # fmt: skip
            graded = await run_graded(options)
            answer = _answer(graded.exit_code, graded.to_json(), graded.error or "", started)
            if graded.exit_code == EXIT_HARNESS:
                # a grade runs an errored seed again in a fresh environment: new servers
                answer["retire"] = True
            return answer
        result = await run_scenario(options)
    except Exception as exc:  # one run's failure is its answer, not the worker's
        return _failed(exc, started)
    return _answer(result.exit_code, result.to_json(), "", started)


def _failed(exc: Exception, started: float) -> dict[str, Any]:
    """The answer for a run that raised: a ChaosError (alone or grouped by nurseries) as its
    one line and exit code, as ``chaos run`` prints it; anything else a harness error with
    its traceback on the worker's stderr. Either way the worker goes on."""
    first: BaseException = exc
    while isinstance(first, BaseExceptionGroup) and first.exceptions:
        first = first.exceptions[0]
    if isinstance(first, ConfigError):
        return _answer(EXIT_BAD_INPUT, None, str(first), started)
    if not isinstance(first, ChaosError):
        traceback.print_exception(exc, file=sys.stderr)
    message = str(first) if isinstance(first, ChaosError) else f"{type(first).__name__}: {first}"
    return _answer(EXIT_HARNESS, None, message, started)


def _answer(
    code: int, verdict: dict[str, Any] | None, error: str, started: float
) -> dict[str, Any]:
    return {
        "exit_code": code,
        "verdict": verdict,
        "error": error,
        "wall_s": round(time.monotonic() - started, 3),
        "pid": os.getpid(),
    }


async def serve(requests: trio.abc.ReceiveStream, answers: trio.abc.SendStream) -> None:
    """Answer JSON-line requests until ``requests`` ends, with warm services started at the
    first request of a scenario that wants them."""
    scenarios: dict[str, Any] = {}
    buffer = bytearray()
    with open_run_dir(prefix="chaos-warm-") as run_dir:
        async with _lazy_warm(run_dir) as get_warm, zygote.open_zygotes(run_dir) as get_zygote:
            while True:
                while b"\n" not in buffer:
                    chunk = await requests.receive_some(65536)
                    if not chunk:
                        return
                    buffer += chunk
                line, _, rest = bytes(buffer).partition(b"\n")
                buffer = bytearray(rest)
                try:
                    request = json.loads(line)
                except ValueError:
                    request = {}
                warm = await get_warm(request, scenarios)
                found = scenarios.get(request.get("scenario"))  # loaded by get_warm
                forks = await get_zygote(getattr(found, "zygote_preload", ()))
                with zygote.using(forks):
                    answer = await run_one(request, warm, scenarios)
                await answers.send_all(json.dumps(answer, sort_keys=True).encode() + b"\n")
                if answer.get("retire"):
                    return  # stops the servers; a pool starts a new worker


@asynccontextmanager
async def _lazy_warm(run_dir: Path) -> AsyncIterator[Any]:
    async with trio.open_nursery() as nursery:
        holder: list[WarmServices] = []
        stop = trio.Event()

        async def keep(task_status: Any) -> None:
            async with open_warm_services(run_dir) as warm:
                holder.append(warm)
                task_status.started()
                # Until the worker's last run is torn down, even when the worker is being
                # stopped: that run's teardown still drops its database and streams here.
                # (Not when the start itself was cancelled: trio then keeps this task with
                # the caller, which waits for it, and no run has the services yet.)
                started = trio.lowlevel.current_task().parent_nursery is nursery
                with trio.CancelScope(shield=started):
                    await stop.wait()

        async def get(request: Mapping[str, Any], scenarios: dict[str, Any]) -> WarmServices | None:
            name = request.get("scenario")
            if not isinstance(name, str):
                return None
            try:
                if name not in scenarios:
                    scenarios[name] = load_scenario(name)
            except ConfigError:
                return None
            if not getattr(scenarios[name], "warm_services", False):
                return None
            if not holder:
                await nursery.start(keep)
            return holder[0]

        try:
            yield get
        finally:
            stop.set()


def main() -> None:
    """``python -m chaos.warm_worker``: a worker; answers go to the real stdout, anything else any
    code prints goes to stderr, so a stray print cannot break the protocol."""
    _signals.install()
    answers_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    async def worker() -> None:
        async with (
            trio.lowlevel.FdStream(os.dup(0)) as requests,
            trio.lowlevel.FdStream(answers_fd) as answers,
        ):
            await serve(requests, answers)

    try:
        _signals.run(worker)
    except _signals.Interrupted as exc:
        _signals.ignore_further()
        raise SystemExit(exc.exit_code) from None
    except ChaosError as exc:
        _signals.ignore_further()
        print(f"chaos warm worker: error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_HARNESS) from None
    finally:
        _signals.ignore_further()


if __name__ == "__main__":
    main()
