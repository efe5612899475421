"""Run a command and report its own CPU time and peak RSS as the last line of stderr (JSON).

Why a launcher: a child's `ru_maxrss` starts from the RSS of the process that exec'd it (Linux
keeps the high-water mark of the replaced address space), so a command started straight from a
benchmark that holds 100k pods (the stand-in API server of `audit --cluster`) "peaked" at the
benchmark's size. This launcher is a small interpreter: the command it forks starts from its
footprint (a few MiB), and wait4 here gives that command's CPU (its reaped workers included)
and peak RSS alone.

    python bench/audit_launch.py COMMAND [ARGS...]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def main() -> int:
    child = subprocess.Popen(sys.argv[1:])
    _, status, usage = os.wait4(child.pid, 0)
    report = {
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,  # KiB on Linux
        "exit": os.waitstatus_to_exitcode(status),
    }
    sys.stderr.write("\n" + json.dumps(report) + "\n")
    return int(report["exit"])


if __name__ == "__main__":
    sys.exit(main())
