"""Where `audit`'s work goes, in instructions per object: load-independent, split by library.

    python -m bench.audit_instructions [--rules two|pack|pack-ns|DIR] [--baseline SRC] [--small 500 --large 1500] [-- AUDIT-ARGS]

Wall and CPU time on this shared 2-core machine vary by up to 25% between identical runs;
instructions do not. The real command (`gpu-webhook audit DIR --rules R -o json`) runs under
`valgrind --tool=cachegrind --cache-sim=no` (PYTHONHASHSEED=0) on `--small` and on `--large`
generated pods (bench/manifests.py); the difference divided by the difference in pods is the
cost of one more object, startup excluded. `cg_annotate` names each function with its source
file or symbol, and the functions are grouped by where they come from: the CEL runtime (C++,
value conversion included), libyaml, rapidyaml, the Python interpreter (bytecode, dicts,
objects), its regex engine, libc (malloc, memcpy) and the rest (orjson and other code without
symbols). `pack-ns` is the pack with the pods' Namespace objects (`--namespace-objects`, as
bench.audit_bench writes them), so every rule is evaluated. `--baseline SRC` measures another tree of the `webhook` package the same way (e.g.
`git archive <commit> webhook | tar -x -C SRC`). Instructions are not time (C code retires more
of them per cycle than the interpreter's dispatch), so use them for ratios of one part.
Needs valgrind (not in the `bench` extra: a system package).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.audit_bench import RULES, child_env, write_namespaces
from tests.support import manifests

ROOT = Path(__file__).resolve().parents[1]

# (group, patterns in the function's file:symbol name, lower case); the first that matches wins
GROUPS: list[tuple[str, tuple[str, ...]]] = [
    ("libyaml (C)", ("libyaml", "yaml_parser", "yaml_emitter", "yaml_event", "yaml_token", "/_yaml.c")),
    ("rapidyaml (C++)", ("c4::", "ryml", "rapidyaml")),
    ("CEL runtime (C++), conversion included", ("cel_python", "cel::", "google::", "absl::", "cel_expr", "pybind")),
    ("Python: regex engine", ("_sre", "sre_lib")),
    ("Python: compiler (imports)", ("parser/pegen", "python/compile.c", "python/marshal.c", "parser/")),
    ("Python interpreter", ("python-3", "/python/", "/objects/", "/include/")),
    ("libc (malloc, memcpy, ...)", ("malloc", "memmove", "memset", "memcpy", "/string/", "libc", "/nptl/", "/elf/")),
]
OTHER = "other (orjson, code without symbols)"
_LINE = re.compile(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$")


def group_of(function: str) -> str:
    name = function.lower()
    for group, patterns in GROUPS:
        if any(pattern in name for pattern in patterns):
            return group
    return OTHER


def count(pods: Path, rules: Path, extra: list[str], source: str | None) -> collections.Counter[str]:
    """Instructions of one audit run, per group."""
    with tempfile.TemporaryDirectory(prefix="audit-instructions-") as tmp:
        out = Path(tmp) / "cachegrind.out"
        command = [sys.executable, "-m", "webhook.cli", "audit", str(pods), "--rules", str(rules), "-o", "json"]
        env = {**child_env(), "PYTHONHASHSEED": "0"}
        if source:
            env["PYTHONPATH"] = source  # ahead of the editable install: that tree's `webhook` runs
        valgrind = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}"]
        # `-m` puts the working directory first on sys.path: the tree whose code is measured
        cwd = source or ROOT
        subprocess.run(
            [*valgrind, *command, *extra],
            env=env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        annotated = subprocess.run(
            ["cg_annotate", "--auto=no", "--threshold=0", str(out)], capture_output=True, text=True, check=True
        ).stdout
    groups: collections.Counter[str] = collections.Counter()
    for line in annotated.splitlines():
        found = _LINE.match(line)
        if found is not None and "PROGRAM TOTALS" not in line:
            groups[group_of(found.group(2))] += int(found.group(1).replace(",", ""))
    return groups


def per_object(rules: Path, small: int, large: int, extra: list[str], source: str | None) -> dict[str, float]:
    # bytecode first: a module compiled during the first (small) run only would be subtracted
    # from the per-object figure (~100k instructions per object for a few changed modules)
    package = Path(source or ROOT) / "webhook"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=False, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="audit-instructions-pods-") as tmp:
        counts = []
        for size in (small, large):
            pods = Path(tmp) / str(size)
            pods.mkdir()
            manifests.pods(pods, size)
            counts.append(count(pods, rules, extra, source))
    return {group: (counts[1][group] - counts[0][group]) / (large - small) for group in set(counts[0]) | set(counts[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rules", default="two", help="two, pack, pack-ns, or a rules directory")
    parser.add_argument("--baseline", help="another tree of the webhook package, measured the same way")
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--large", type=int, default=1500)
    parser.add_argument("audit_args", nargs="*", help="after --: extra arguments for `gpu-webhook audit`")
    args = parser.parse_args()
    rules = RULES.get(args.rules, Path(args.rules))
    trees = [("this tree", None)] + ([("baseline", os.path.abspath(args.baseline))] if args.baseline else [])
    with tempfile.TemporaryDirectory(prefix="audit-instructions-namespaces-") as tmp:
        extra = list(args.audit_args)
        if args.rules == "pack-ns":
            extra += ["--namespace-objects", str(write_namespaces(Path(tmp)))]
        results = {name: per_object(rules, args.small, args.large, extra, source) for name, source in trees}
    names = [name for name, _ in trees]
    print(f"instructions per object, {rules.name}, ({args.large} - {args.small} pods) / {args.large - args.small}")
    print("| part | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names))
    first = results[names[0]]
    for group in sorted(first, key=lambda g: -first[g]):
        print(f"| {group} | " + " | ".join(f"{results[n].get(group, 0) / 1000:,.1f}k" for n in names) + " |")
    print("| **total** | " + " | ".join(f"**{sum(results[n].values()) / 1000:,.1f}k**" for n in names) + " |")


if __name__ == "__main__":
    main()
