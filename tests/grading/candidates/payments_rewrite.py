"""Adversary (payments): tries to reach the evidence as the superuser (refused: every login
needs its password), then charges every order twice and deletes the duplicate rows (as
double_charge.py). Expected: every probe refused; exactly_once fails from the gateway's list."""

import os
import runpy
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pg_probe import probe

probe(os.environ["PG_DSN"])
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "double_charge.py"),
               run_name="__main__")  # fmt: skip
