"""A tiny service for the zygote tests, run as ``python -m tests.services.zygote_svc MODE``."""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    mode = sys.argv[1]
    if mode == "echo":
        print("hello")
        print("oops", file=sys.stderr)
        print("bye")
    elif mode == "exit":
        sys.exit(int(sys.argv[2]))
    elif mode == "raise":
        raise RuntimeError("boom from the service")
    elif mode == "env":
        print(f"x={os.environ.get('ZYGOTE_TEST_X')}")
        print(f"cwd={os.getcwd()}")
        print(f"argv={sys.argv[1:]}")
        print(f"path0={sys.path[0]}")
        print(f"main={__name__}")
        print(f"ppid={os.getppid()}")
        print(f"pgid={os.getpgid(0)}")
    elif mode == "clock":
        print("ready", flush=True)
        while True:
            print(f"skew={time.time() - float(sys.argv[2]) - time.monotonic():.0f}", flush=True)
            time.sleep(0.05)
    elif mode == "gc":  # does the collector walk what the zygote imported (json's code)?
        import gc
        import json

        decode = json.decoder.JSONDecoder.decode
        print(f"walks_preloaded={any(o is decode for o in gc.get_objects())}")
        print(f"walks_its_own={any(o is main for o in gc.get_objects())}")
    elif mode == "sleep":
        print("ready", flush=True)
        time.sleep(600)


if __name__ == "__main__":
    main()
