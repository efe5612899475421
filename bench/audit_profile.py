"""Where `audit`'s CPU goes: py-spy samples of the real command, folded into parts that add up to 100%.

    python -m bench.audit_profile [--size 20000] [--rules two|pack] [--raw FILE] [-- AUDIT-ARGS]

Generates the pods of bench/audit_data.py, runs `gpu-webhook audit DIR -o json` under
`py-spy record` (needs the `bench` extra and ptrace permission), and folds each sampled stack
into the first part below whose marks one of its frames contains (innermost frames are looked
at first, so "CEL" inside the engine counts as CEL, not as the engine). `--raw FILE` folds a
py-spy raw file recorded earlier instead.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import audit_data
from bench.audit_bench import RULES, child_env
from bench.profile import count_samples

ROOT = Path(__file__).resolve().parents[1]


def _at(path: str, text: str) -> str:
    """The frame mark `file:line)` of the first line of webhook/kubeyaml/PATH that contains `text`."""
    lines = (ROOT / "webhook" / "kubeyaml" / path).read_text().splitlines()
    number = next((i for i, line in enumerate(lines, 1) if text in line), 0)
    return f"{path}:{number})"


# (part, marks): a frame containing a mark puts the sample in the part; the innermost match wins
PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("startup: imports", ("_find_and_load", "<frozen importlib._bootstrap")),
    ("startup: rules and parser", ("load_ruleset (", "build_parser (")),
    ("YAML: syntax check (libyaml events, C)", (_at("rapid.py", ".raw_parse()"),)),
    ("YAML: rapidyaml parse and JSON emit (C++)", ("_parse (webhook/kubeyaml/rapid.py", "_emit_json (")),
    ("YAML: orjson and the checks of rapid.py", ("webhook/kubeyaml/rapid.py",)),
    ("YAML: libyaml path (compose)", ("check_node (", "get_node (", "compose_", "_compose")),
    ("YAML: manifests.py (libyaml path), scalars.py (go_plain)", ("kubeyaml/manifests.py", "kubeyaml/scalars.py")),
    ("YAML: reference loader", ("yaml/constructor.py", "Loader.construct_mapping (")),
    ("diff: YAML dump", ("plain_yaml", "kubeyaml/block.py", "pyyaml_dump (", "yaml/emitter.py", "_node (")),
    ("diff: difflib and linediff", ("difflib.py", "linediff.py")),
    ("JSON report", ("webhook/audit/formats/",)),
    ("engine: CEL", ("webhook/engine/cel.py", "celhelpers.py")),
    ("engine: GPU count", ("webhook/engine/resources.py",)),
    ("engine: Decision.outcomes()", ("outcomes (",)),
    ("engine: other", ("webhook/engine/",)),
    ("admission input (NamespaceContext)", ("NamespaceContext.admission (", "NamespaceContext.take (")),
    ("tally", ("Tally.add (",)),
    ("audit: results", ("webhook/audit/results.py",)),
    ("reading files (sources.py)", ("webhook/audit/sources.py",)),
]
OTHER = "other (interpreter, GC, audit command)"
# parts named by an outer frame, whatever runs inside it
OUTER: list[tuple[str, str]] = [("audit: second GPU count (requested_accelerators)", "requested_accelerators (")]


def part_of(stack: str) -> str:
    for name, mark in OUTER:
        if mark in stack:
            return name
    frames = stack.split(";")
    for frame in reversed(frames):  # innermost first
        for name, marks in PARTS:
            if any(mark in frame for mark in marks):
                return name
    return OTHER


def fold(raw: str) -> dict[str, float]:
    counts, total = count_samples(raw, part_of)
    names = [name for name, _ in OUTER] + [name for name, _ in PARTS] + [OTHER]
    return {name: counts[name] / total for name in names if counts[name]} if total else {}


def _py_spy() -> str:
    beside = Path(sys.executable).with_name("py-spy")  # the venv's, when it is not on PATH
    return str(beside) if beside.exists() else "py-spy"


def record(size: int, rules: str, extra: list[str], out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="audit-profile-") as tmp:
        audit_data.pods(Path(tmp), size)
        command = [sys.executable, "-m", "webhook.cli", "audit", tmp, "--rules", str(RULES[rules]), "-o", "json"]
        spy = [_py_spy(), "record", "-r", "200", "-f", "raw", "-o", str(out), "--", *command, *extra]
        subprocess.run(
            spy, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=3600, env=child_env()
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--rules", choices=sorted(RULES), default="two")
    parser.add_argument("--raw", type=Path, help="fold this py-spy raw file instead of recording")
    parser.add_argument("audit_args", nargs="*", help="after --: extra arguments for `gpu-webhook audit`")
    args = parser.parse_args()
    raw = args.raw
    if raw is None:
        raw = Path(tempfile.gettempdir()) / f"audit-profile-{args.rules}-{args.size}.raw"
        record(args.size, args.rules, args.audit_args, raw)
        print(f"raw samples: {raw}", file=sys.stderr)
    print("| part | share |\n|---|---|")
    for name, share in sorted(fold(raw.read_text()).items(), key=lambda item: -item[1]):
        print(f"| {name} | {share:.1%} |")


if __name__ == "__main__":
    main()
