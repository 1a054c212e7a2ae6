"""Running a candidate's program in place of a task's service, isolated and limited.

``candidate`` describes (``Program``, ``Limits``, ``Candidate``, ``CandidateReport``, the
``Sandbox`` protocol); ``process`` is the process sandbox (``ProcessSandbox``); ``graded`` runs
one scenario with a candidate under the wall-clock limit (``chaos run --impl``). See
docs/grading.md.
"""

from chaos.sandbox.candidate import (
    Candidate,
    CandidateReport,
    CandidateSpec,
    Limits,
    Program,
    Sandbox,
)

__all__ = ["Candidate", "CandidateReport", "CandidateSpec", "Limits", "Program", "Sandbox"]
