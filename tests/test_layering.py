"""The house's design rules, read from the imports: YAML in one room, and no arrow back up a floor.

Every module under webhook/, and bench/, is parsed (imports inside functions and under
TYPE_CHECKING included: a lazy import is still a dependency). A room is a package of webhook/
(`webhook/kube/`) or a top-level module (`webhook/certs.py`); FLOORS puts each room on a floor,
and a module may import only from its own floor or below. A room not in FLOORS fails the test
that names it: a new package is placed on purpose, never by accident.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
YAML_ROOM = "kubeyaml"

# from the ground up; a room may import its own floor and the floors below it
FLOORS: tuple[frozenset[str], ...] = (
    # ground: plain tools every floor may use (_version: setuptools-scm's, written at install)
    frozenset({"__init__", "_version", "kubeyaml", "cel", "version", "certs", "junit"}),
    frozenset({"engine"}),
    # the AdmissionReview v1 codec (review.py) beside the other renderings of the engine's answers
    frozenset({"export", "install", "review"}),
    frozenset({"kube"}),
    frozenset({"audit"}),
    frozenset({"authoring"}),  # suites run on the audit's namespace context
    frozenset({"policies"}),  # the /policies check runs lint
    frozenset({"server"}),
    frozenset({"commands"}),
    frozenset({"cli"}),
)
FLOOR = {room: number for number, rooms in enumerate(FLOORS) for room in rooms}
BENCH_FLOOR = len(FLOORS)  # bench/ drives the whole program from above; nothing in webhook/ imports it


def modules() -> Iterator[tuple[str, Path]]:
    """(dotted name, path) of every module of webhook/ and bench/."""
    for top in ("webhook", "bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__" and len(parts) > 1:
                parts.pop()
            yield ".".join(parts), path


def imports(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in the file; `from P import m` of a submodule m is P.m."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                known = _module_path(submodule)
                yield node.lineno, submodule if known else source


def _module_path(name: str) -> Path | None:
    relative = Path(*name.split("."))
    for candidate in (ROOT / relative.with_suffix(".py"), ROOT / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def room(module: str) -> str | None:
    """webhook.kube.caches -> kube; webhook.certs -> certs; webhook -> __init__; None outside webhook."""
    parts = module.split(".")
    if parts[0] != "webhook":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def floor(module: str) -> int | None:
    if module.split(".")[0] == "bench":
        return BENCH_FLOOR
    name = room(module)
    return None if name is None else FLOOR.get(name)


# -- YAML in one place ------------------------------------------------------------------------------


def yaml_imports(module: str, path: Path) -> Iterator[str]:
    if room(module) == YAML_ROOM:
        return
    for line, imported in imports(module, path):
        if imported == "yaml" or imported.startswith("yaml."):
            yield f"{module}:{line}: {imported}"


def test_only_kubeyaml_imports_pyyaml() -> None:
    """Every YAML load and dump goes through webhook.kubeyaml (its readers, its named styles)."""
    found = [line for module, path in modules() for line in yaml_imports(module, path)]
    assert found == [], "read and write YAML with webhook.kubeyaml (Loader, plain_documents, styles.*)"


def test_the_yaml_check_sees_every_form_of_import(tmp_path: Path) -> None:
    door = tmp_path / "door.py"
    door.write_text(
        "import yaml\nfrom yaml import CSafeDumper\nimport yaml.nodes as nodes\ndef later():\n    from yaml import dump\n"
    )
    assert list(yaml_imports("webhook.audit.door", door)) == [
        "webhook.audit.door:1: yaml",
        "webhook.audit.door:2: yaml",
        "webhook.audit.door:3: yaml.nodes",
        "webhook.audit.door:5: yaml",
    ]
    assert list(yaml_imports("webhook.kubeyaml.door", door)) == []


# -- no arrow back up --------------------------------------------------------------------------------


def upward_imports(module: str, path: Path) -> Iterator[str]:
    own = floor(module)
    assert own is not None, f"{module}: its room is on no floor of FLOORS"
    for line, imported in imports(module, path):
        if imported.split(".")[0] == "bench" and module.split(".")[0] != "bench":
            yield f"{module}:{line}: imports {imported} (bench/ is above every room)"
            continue
        target = floor(imported)
        if target is not None and target > own:
            yield f"{module}:{line}: imports {imported} (floor {target}, above its own {own})"


def test_every_room_is_on_a_floor() -> None:
    rooms = {room(module) for module, _ in modules()} - {None}
    assert sorted(r for r in rooms if r not in FLOOR) == [], "put each new room of webhook/ on a floor of FLOORS"


def test_no_import_runs_up_a_floor() -> None:
    found = [line for module, path in modules() for line in upward_imports(module, path)]
    assert found == []


def test_the_floor_check_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    door = tmp_path / "door.py"
    door.write_text(
        "from webhook.engine import evaluate\n"  # down: fine
        "from . import caches\n"  # its own room: fine
        "def later():\n"
        "    from webhook.commands.common import load_ruleset\n"
        "    import webhook.server.app\n"
        "    from ..install import crds\n"
    )
    assert list(upward_imports("webhook.kube.door", door)) == [
        f"webhook.kube.door:4: imports webhook.commands.common (floor {FLOOR['commands']}, above its own {FLOOR['kube']})",
        f"webhook.kube.door:5: imports webhook.server.app (floor {FLOOR['server']}, above its own {FLOOR['kube']})",
    ]
    assert list(upward_imports("webhook.install.door", door)) == [
        f"webhook.install.door:4: imports webhook.commands.common (floor {FLOOR['commands']}, above its own {FLOOR['install']})",
        f"webhook.install.door:5: imports webhook.server.app (floor {FLOOR['server']}, above its own {FLOOR['install']})",
    ]


def room_arrows() -> dict[str, set[str]]:
    """room -> the other rooms of webhook/ it imports."""
    arrows: dict[str, set[str]] = {}
    for module, path in modules():
        source = room(module)
        if source is not None:
            targets = {room(imported) for _, imported in imports(module, path)} - {None, source}
            arrows.setdefault(source, set()).update(r for r in targets if r is not None)
    return arrows


def circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more rooms that reach each other (strongly connected), each sorted."""
    reach = {start: _reachable(arrows, start) for start in arrows}
    groups = {frozenset(r for r in reach if start in reach[r] and r in reach[start]) for start in arrows}
    return sorted(sorted(group) for group in groups if len(group) > 1)


def _reachable(arrows: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(arrows.get(start, ()))
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(arrows.get(name, ()))
    return seen


def test_the_circle_check_finds_a_circle() -> None:
    arrows = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert circles(arrows) == [["a", "b", "c"]]


def test_no_circle_of_rooms() -> None:
    assert circles(room_arrows()) == []


@pytest.mark.parametrize(("module", "expected"), [("webhook.kube.caches", "kube"), ("webhook", "__init__")])
def test_rooms_are_named_by_their_package(module: str, expected: str) -> None:
    assert room(module) == expected
