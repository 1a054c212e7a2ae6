#!/bin/sh
# A shell candidate (any language runs): reports who and where it is, and what it can read.
# KEY below is filled in by the test. Expected under --isolation uid: its own unprivileged
# uid, its scratch directory as home, only the task's variables, the key closed to it.
KEY=/nonexistent
echo "PROBE uid $(id -u)"
echo "PROBE home $HOME pwd $(pwd)"
echo "PROBE env $(env | cut -d= -f1 | sort | tr '\n' ' ')"
if cat "$KEY" >/dev/null 2>&1; then echo "PROBE key READ"; else echo "PROBE key denied"; fi
trap 'exit 0' TERM
echo "consumer ready"
while true; do sleep 1; done
