"""The nemesis: applies a run's fault schedule and heals every fault, however the run ends.

::

    chaos/nemesis/
      nemesis.py    Nemesis: trigger -> apply -> hold -> heal (shielded), per fault
      triggers.py   at_time, on_connection, after_bytes, on_message
      protocol.py   NemesisContext: what it needs from a run (RunContext satisfies it);
                  Subject: a message subject faults can target
      applier.py    Applier, Applied: one applier per fault layer
      network.py    NETWORK  partition, latency, bandwidth, reset_peer, slow_close (toxics)
      message.py    MESSAGE  redeliver, duplicate_publish (NATS-aware toxics)
      process.py    PROCESS  crash, pause (signals)
      clock.py      CLOCK    clock_skew (libfaketime)

``faults.kinds.LAYER`` picks the applier of a kind and ``faults.kinds.TARGET_KIND`` how its
target is found; no code branches on the kind.
"""

from chaos.nemesis.applier import Applied, Applier, Heal
from chaos.nemesis.nemesis import APPLIERS, Nemesis, resolve_target
from chaos.nemesis.protocol import Link, NemesisContext, Recording, Service, Skew, Subject

__all__ = [
    "APPLIERS",
    "Applied",
    "Applier",
    "Heal",
    "Link",
    "Nemesis",
    "NemesisContext",
    "Recording",
    "Service",
    "Skew",
    "Subject",
    "resolve_target",
]
