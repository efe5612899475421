"""Mutation score of the modules that decide who gets in, counted on the fast test loop.

    python -m bench.mutation [MODULE ...] [--list] [--keep DIR]

For each module (MODULES: matching, ratcheting, exceptions, overlays, resources' accelerator and
MIG counting, patch, pointer, the server's admission parsing) cosmic-ray (the `mutation` extra)
makes mutants with the operators in KEPT (flipped comparisons, and/or swapped, `not` dropped or
added, True/False and numbers changed, exceptions replaced, loops run zero times, break and
continue swapped) and runs the module's focused selection of fast tests (`-m "not slow"`) on each.
Mutants run in a copy of the checkout (its tracked and untracked-but-not-ignored files), so the
checkout itself is never mutated. The score is killed / (mutants - recorded equivalents); a
survivor recorded in bench/mutation_equivalents.toml (module, the source line, the operator, the
reason; optionally `mutated`, the line as the mutant has it, when one operator makes several mutants
of a line and only some are equivalent) is not counted against it, and a record that matches no survivor is reported as stale.

This is a measurement, not a CI gate: a module takes 2-10 minutes on a quiet 2-core machine.
It runs at `nice -n 15` and one module at a time (the machine is shared). The result of each
module is printed and written to bench/results/mutation-MODULE.json.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENTS = ROOT / "bench" / "mutation_equivalents.toml"
RESULTS = ROOT / "bench" / "results"
NICENESS = 15
TIMEOUT_SECONDS = 120  # per mutant: an infinite loop counts as killed after this

ENGINE_TESTS = ("tests/engine", "tests/rules")


@dataclass(frozen=True)
class Module:
    path: str
    tests: tuple[str, ...]
    functions: tuple[str, ...] = ()  # when set, only mutants inside these functions (or methods) count


MODULES: dict[str, Module] = {
    "matching": Module("webhook/engine/matching.py", ENGINE_TESTS),
    "ratcheting": Module("webhook/engine/ratcheting.py", (*ENGINE_TESTS, "tests/deploy/test_registration.py")),
    "exceptions": Module("webhook/engine/exceptions.py", ENGINE_TESTS),
    "overlays": Module("webhook/engine/overlays.py", ("tests/engine",)),
    "resources": Module(
        "webhook/engine/resources.py",
        ENGINE_TESTS,
        functions=(
            "container_count",
            "pod_count",
            "pinned_profiles",
            "_expression_profiles",
            "_term_profiles",
            "_is_profile_attribute",
            "_single_string",
            "_string_list",
            "_literal",
            "_device_count",
            "whole_quantity",
        ),
    ),
    "patch": Module("webhook/engine/patch.py", ENGINE_TESTS),
    "pointer": Module("webhook/engine/pointer.py", ENGINE_TESTS),
    "admission": Module("webhook/review.py", ("tests/server",)),
}

# The operators that model a wrong decision; arithmetic swaps (+ to <<, ...) are left out.
KEPT = re.compile(
    r"core/("
    r"ReplaceComparisonOperator_(Eq_NotEq|NotEq_Eq|Lt_GtE|GtE_Lt|LtE_Gt|Gt_LtE|Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Is_IsNot|IsNot_Is)"
    r"|ReplaceAndWithOr|ReplaceOrWithAnd|ReplaceUnaryOperator_Delete_Not|AddNot"
    r"|ReplaceTrueWithFalse|ReplaceFalseWithTrue|NumberReplacer|ExceptionReplacer|ZeroIterationForLoop"
    r"|ReplaceBreakWithContinue|ReplaceContinueWithBreak"
    r")$"
)


class SelectionFails(RuntimeError):
    """A module's tests fail on the unmutated code: no score can be counted."""


@dataclass(frozen=True)
class Mutant:
    job_id: str
    operator: str
    line: int
    source_line: str
    killed: bool
    diff: str


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help=f"modules to measure (default: all of {', '.join(MODULES)})")
    parser.add_argument("--list", action="store_true", help="list the modules and their test selections")
    parser.add_argument("--keep", type=Path, help="run in (and keep) this directory instead of a temporary one")
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="no run: score the saved results again with the equivalents file as it is now",
    )
    args = parser.parse_args(argv)
    if args.list:
        for name, module in MODULES.items():
            print(f"{name}: {module.path} <- {' '.join(module.tests)}")
        return 0
    unknown = [name for name in args.modules if name not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; choose from {', '.join(MODULES)}")
    equivalents = load_equivalents(EQUIVALENTS)
    if args.rescore:
        return rescore(args.modules or list(MODULES), equivalents)
    os.nice(max(0, NICENESS - os.nice(0)))
    status = 0
    for name in args.modules or list(MODULES):
        try:
            result = measure(name, MODULES[name], equivalents.get(name, []), args.keep)
        except SelectionFails as error:
            print(error)
            status = 1
            continue
        print_result(name, result)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"mutation-{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        status |= 0 if result["score"] >= 0.95 else 1
    return status


def rescore(names: list[str], equivalents: dict[str, list[dict[str, str]]]) -> int:
    """Score saved results again: survivors a record now explains count as equivalent."""
    status = 0
    for name in names:
        saved = RESULTS / f"mutation-{name}.json"
        if not saved.exists():
            print(f"{name}: no saved result ({saved})")
            status = 1
            continue
        result = json.loads(saved.read_text())
        survivors = [Mutant("", s["operator"], s["line"], s["source"], False, s["diff"]) for s in result["survivors"]]
        fresh = score(MODULES[name], survivors, len(survivors), equivalents.get(name, []), result["seconds"])
        result["equivalents"] += fresh["equivalents"]
        used = {(e["operator"], e.get("source", "")) for e in result["equivalents"]}
        result["survivors"] = fresh["survivors"]
        result["stale_records"] = [r for r in fresh["stale_records"] if (r["operator"], r["line"].strip()) not in used]
        result["equivalent"] = len(result["equivalents"])
        result["survived"] = len(result["survivors"])
        denominator = result["mutants"] - result["equivalent"]
        result["score"] = round(result["killed"] / denominator, 4) if denominator else 1.0
        print_result(name, result)
        saved.write_text(json.dumps(result, indent=2) + "\n")
        status |= 0 if result["score"] >= 0.95 else 1
    return status


def load_equivalents(path: Path) -> dict[str, list[dict[str, str]]]:
    """module -> its recorded equivalent mutants; each record needs module, line, operator, reason."""
    records = tomllib.loads(path.read_text()).get("equivalent", []) if path.exists() else []
    by_module: dict[str, list[dict[str, str]]] = {}
    for number, record in enumerate(records, 1):
        missing = [key for key in ("module", "line", "operator", "reason") if not str(record.get(key, "")).strip()]
        if missing:
            raise SystemExit(f"{path}: equivalent #{number}: missing {', '.join(missing)}")
        if record["module"] not in MODULES:
            raise SystemExit(f"{path}: equivalent #{number}: unknown module {record['module']!r}")
        by_module.setdefault(record["module"], []).append(record)
    return by_module


def measure(name: str, module: Module, equivalents: list[dict[str, str]], keep: Path | None) -> dict[str, Any]:
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix=f"mutation-{name}-")) if keep is None else keep / name
    try:
        copy_checkout(workdir)
        runner = [sys.executable, str(workdir / "bench" / "mutation.py"), "--run-tests", module.path, "--"]
        pytest = ["-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", *module.tests]
        command = " ".join(runner + pytest).replace("not slow", "'not slow'")
        config = workdir / "mutation.toml"
        config.write_text(
            "[cosmic-ray]\n"
            f"module-path = {json.dumps(module.path)}\n"
            f"timeout = {TIMEOUT_SECONDS}\n"
            "excluded-modules = []\n"
            f"test-command = {json.dumps(command)}\n"
            '[cosmic-ray.distributor]\nname = "local"\n'
        )
        env = {**os.environ, "PYTHONPATH": str(workdir)}
        baseline = subprocess.run([*runner, *pytest], cwd=workdir, env=env, capture_output=True, text=True)
        if baseline.returncode != 0:
            raise SelectionFails(f"{name}: the test selection fails without any mutant:\n{baseline.stdout[-3000:]}")
        session = workdir / "session.sqlite"
        cosmic_ray = str(Path(sys.executable).with_name("cosmic-ray"))
        subprocess.run([cosmic_ray, "init", str(config), str(session)], cwd=workdir, env=env, check=True)
        counted = skip_uncounted(session, workdir / module.path, module.functions)
        subprocess.run([cosmic_ray, "exec", str(config), str(session)], cwd=workdir, env=env, check=True)
        mutants = read_mutants(session, workdir / module.path)
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return score(module, mutants, counted, equivalents, time.monotonic() - started)


def copy_checkout(target: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for relative in filter(None, listed.split("\0")):
        source = ROOT / relative
        if source.is_file():
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)


def function_lines(source: Path, names: tuple[str, ...]) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in names:
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def skip_uncounted(session: Path, source: Path, functions: tuple[str, ...]) -> int:
    """Mark as skipped the mutants of operators not KEPT and, for a function list, outside it; the count left."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    inside = function_lines(source, functions) if functions else None
    left = 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            mutation = item.mutations[0]
            outside = inside is not None and mutation.start_pos[0] not in inside
            if outside or not KEPT.match(mutation.operator_name):
                db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="not counted"))
            else:
                left += 1
    return left


def read_mutants(session: Path, source: Path) -> list[Mutant]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome

    lines = source.read_text().splitlines()
    mutants = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            mutation = item.mutations[0]
            line = mutation.start_pos[0]
            mutants.append(
                Mutant(
                    item.job_id,
                    mutation.operator_name,
                    line,
                    lines[line - 1].strip(),
                    result.is_killed and result.worker_outcome == WorkerOutcome.NORMAL,
                    result.diff or "",
                )
            )
    return sorted(mutants, key=lambda mutant: (mutant.line, mutant.operator))


def score(
    module: Module, mutants: list[Mutant], counted: int, equivalents: list[dict[str, str]], seconds: float
) -> dict[str, Any]:
    survivors = [mutant for mutant in mutants if not mutant.killed]
    used: set[int] = set()
    unexplained = []
    equivalent = []
    for mutant in survivors:
        match = next(
            (
                index
                for index, record in enumerate(equivalents)
                if record["operator"] == mutant.operator
                and record["line"].strip() == mutant.source_line
                and record.get("mutated", mutated(mutant)).strip() == mutated(mutant)
            ),
            None,
        )
        if match is None:
            unexplained.append(mutant)
        else:
            used.add(match)
            equivalent.append((mutant, equivalents[match]["reason"]))
    killed = len(mutants) - len(survivors)
    denominator = len(mutants) - len(equivalent)
    return {
        "module": module.path,
        "tests": list(module.tests),
        "mutants": len(mutants),
        "not_run": counted - len(mutants),
        "killed": killed,
        "equivalent": len(equivalent),
        "survived": len(unexplained),
        "score": round(killed / denominator, 4) if denominator else 1.0,
        "seconds": round(seconds, 1),
        "survivors": [
            {"line": m.line, "operator": m.operator, "source": m.source_line, "mutated": mutated(m), "diff": m.diff}
            for m in unexplained
        ],
        "equivalents": [
            {"line": m.line, "operator": m.operator, "source": m.source_line, "reason": reason}
            for m, reason in equivalent
        ],
        "stale_records": [record for index, record in enumerate(equivalents) if index not in used],
    }


def mutated(mutant: Mutant) -> str:
    """The mutated line as the diff shows it (stripped); "" when the diff has none."""
    added = [line[1:] for line in mutant.diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return added[0].strip() if added else ""


def print_result(name: str, result: dict[str, Any]) -> None:
    print(
        f"{name}: {result['score']:.1%} killed of non-equivalent mutants ({result['killed']} killed, "
        f"{result['survived']} survived, {result['equivalent']} recorded equivalent, {result['mutants']} mutants, "
        f"{result['seconds']:.0f} s)"
    )
    if result["not_run"]:
        print(f"  {result['not_run']} mutants did not run (an exception in cosmic-ray's worker)")
    for survivor in result["survivors"]:
        print(f"  survived: line {survivor['line']} {survivor['operator']}: {survivor['source']}")
        print(f"            as: {survivor['mutated']}")
    for record in result["stale_records"]:
        print(f"  stale equivalent record (no such survivor): {record['operator']}: {record['line']}")


def run_tests(module_path: str, command: list[str]) -> int:
    """The test command of one mutant: compiled afresh (the mutated module's cached bytecode removed), the
    rest of the package from its cache (cosmic-ray turns bytecode off, which costs ~2 s a run)."""
    source = Path(module_path)
    for cached in (source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"):
        cached.unlink()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run([sys.executable, *command], env=env).returncode


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--run-tests" and sys.argv[3] == "--":
        sys.exit(run_tests(sys.argv[2], sys.argv[4:]))
    sys.exit(main())
