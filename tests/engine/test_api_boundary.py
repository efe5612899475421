"""The engine's `__init__` is its API: the doors import from `webhook.engine` only.

Every module under webhook/ outside webhook/engine/, and bench/, is parsed (imports inside
functions included): none may import a module of the engine (`webhook.engine.loader`, or
`from webhook.engine import loader`), nor a name `webhook.engine.__all__` does not list; the
documents' vocabulary comes from `webhook.engine.documents`, by the names its `__all__` lists.
So the engine's modules can be split, merged and renamed behind the API without touching a
door, and what the doors depend on is one short list, read in one place. Below the engine,
`webhook.cel` imports nothing else of webhook; and the engine's modules import each other
without a circle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import webhook.engine
import webhook.engine.documents
from webhook.engine import MUTATIONS
from webhook.export.mutations import BY_RESOURCE_PREFIX, POD_SPEC_MUTATIONS, TRANSLATIONS

ROOT = Path(__file__).resolve().parents[2]
ENGINE = "webhook.engine"
DOCUMENTS = "webhook.engine.documents"
# The face's budget of names (the documents' vocabulary is webhook.engine.documents, apart)
BUDGET = 40


def _door_modules() -> Iterator[tuple[str, Path]]:
    for top in ("webhook", "bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative.parts[:2] == ("webhook", "engine"):
                continue
            parts = list(relative.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), path


def _imported_module(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The absolute name of the module an ImportFrom reads (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def engine_imports(module: str, path: Path) -> Iterator[str]:
    """What `module` imports from the engine past its API, one line each: `module: name`."""
    faces = {ENGINE: set(webhook.engine.__all__), DOCUMENTS: set(webhook.engine.documents.__all__)}
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(ENGINE + "."):
                    yield f"{module}:{node.lineno}: import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            source = _imported_module(node, module, path)
            if source.startswith(ENGINE + ".") and source not in faces:
                names = ", ".join(alias.name for alias in node.names)
                yield f"{module}:{node.lineno}: from {source} import {names}"
            elif source in faces:
                for alias in node.names:
                    if alias.name not in faces[source]:
                        yield f"{module}:{node.lineno}: from {source} import {alias.name} (not in its __all__)"


def test_the_doors_import_the_engine_only_through_its_api() -> None:
    doors = list(_door_modules())
    assert len(doors) > 50  # webhook/ and bench/ were found
    found = [line for module, path in doors for line in engine_imports(module, path)]
    assert found == []


def test_the_check_sees_every_form_of_import(tmp_path: Path) -> None:
    door = tmp_path / "door.py"
    door.write_text(
        "import webhook.engine.cel\n"
        "from webhook.engine.loader import load_rules\n"
        "from webhook.engine import evaluate, loader\n"
        "from webhook.engine.documents import POLICY_KIND, selector_of\n"
        "from webhook.engine import AddToleration, MutationView\n"
        "def later():\n"
        "    from ..engine.facts import WorkingCopy\n"
    )
    assert list(engine_imports("webhook.audit.door", door)) == [
        "webhook.audit.door:1: import webhook.engine.cel",
        "webhook.audit.door:2: from webhook.engine.loader import load_rules",
        "webhook.audit.door:3: from webhook.engine import loader (not in its __all__)",
        "webhook.audit.door:4: from webhook.engine.documents import selector_of (not in its __all__)",
        "webhook.audit.door:5: from webhook.engine import AddToleration (not in its __all__)",
        "webhook.audit.door:7: from webhook.engine.facts import WorkingCopy",
    ]


def test_every_name_of_the_api_exists() -> None:
    missing = [name for name in webhook.engine.__all__ if not hasattr(webhook.engine, name)]
    assert missing == []
    assert len(set(webhook.engine.__all__)) == len(webhook.engine.__all__)


def test_the_face_stays_within_its_budget() -> None:
    """About 25-40 names: load, evaluate, what goes in and comes out, and what the doors read of a rule."""
    names = set(webhook.engine.__all__)
    assert len(names) <= BUDGET, sorted(names)
    # no module handed out whole, and no concrete mutation class: doors read a mutation through view()
    modules = [name for name in names if isinstance(getattr(webhook.engine, name), type(ast))]
    assert modules == []
    assert "MutationView" in names and not {"AddToleration", "SetMetadata", "SetQueueName"} & names


def _engine_classes() -> set[str]:
    """The classes the engine's modules define that neither face hands out."""
    handed = set(webhook.engine.__all__) | set(webhook.engine.documents.__all__)
    found = set()
    for path in (ROOT / "webhook" / "engine").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found |= {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    return found - handed


def _bound_names(tree: ast.Module) -> set[str]:
    """Every name a module binds itself: its classes, functions, imports, assignments."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return bound


def reached_classes(module: str, path: Path, internal: set[str]) -> Iterator[str]:
    """Where `module` names an engine class the faces do not hand out: an isinstance on it, a
    type annotation, or its name in a string (type(x).__name__ == ...)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    own = _bound_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in internal and node.id not in own:
            yield f"{module}:{node.lineno}: {node.id}"
        elif isinstance(node, ast.Attribute) and node.attr in internal and node.attr[0].isupper():
            yield f"{module}:{node.lineno}: .{node.attr}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in internal:
            yield f"{module}:{node.lineno}: {node.value!r}"


def test_the_doors_never_reach_engine_classes_the_face_does_not_hand_out() -> None:
    internal = _engine_classes()
    assert {"AddToleration", "SetQueueName", "WorkingCopy", "Programs"} <= internal
    found = [line for module, path in _door_modules() for line in reached_classes(module, path, internal)]
    assert found == []


def test_the_class_check_sees_a_door_that_reaches_in(tmp_path: Path) -> None:
    door = tmp_path / "door.py"
    door.write_text(
        "def translate(mutation, view):\n"
        "    if isinstance(mutation, AddToleration):\n"
        "        return type(view).__name__ == 'SetQueueName'\n"
        "class Programs: ...\n"
        "Programs()\n"
    )
    assert list(reached_classes("webhook.export.door", door, {"AddToleration", "SetQueueName", "Programs"})) == [
        "webhook.export.door:2: AddToleration",
        "webhook.export.door:3: 'SetQueueName'",
    ]


def test_export_translates_mutations_by_their_registry_names() -> None:
    """export/mutations.py dispatches on MutationView.name: every name it knows is one MUTATIONS has."""
    assert set(TRANSLATIONS) | POD_SPEC_MUTATIONS | BY_RESOURCE_PREFIX <= set(MUTATIONS)
    assert set(TRANSLATIONS) >= POD_SPEC_MUTATIONS | BY_RESOURCE_PREFIX


def test_webhook_cel_imports_nothing_else_of_webhook() -> None:
    """The CEL text utilities and quantities are the ground floor: the engine, export and authoring stand on them."""
    found = []
    for path in sorted((ROOT / "webhook" / "cel").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [_imported_module(node, module, path)]
            else:
                continue
            found += [f"{module}:{node.lineno}: {name}" for name in names if _outside_cel(name)]
    assert found == []


def _outside_cel(name: str) -> bool:
    return (name == "webhook" or name.startswith("webhook.")) and not (
        name == "webhook.cel" or name.startswith("webhook.cel.")
    )


def test_the_engine_modules_import_each_other_without_a_circle() -> None:
    """Every import between the engine's modules, lazy and TYPE_CHECKING ones included, runs one way."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "webhook" / "engine").glob("*.py")):
        if path.name == "__init__.py":
            continue  # the face imports every module; no module imports the face
        module = f"{ENGINE}.{path.stem}"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _imported_module(node, module, path)
                if source == ENGINE:
                    targets |= {f"{ENGINE}.{alias.name}" for alias in node.names}
                elif source.startswith(ENGINE + "."):
                    targets.add(source)
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names if alias.name.startswith(ENGINE + ".")}
        graph[module] = targets - {module}
    assert ENGINE not in set().union(*graph.values())  # no module reaches back up into the face
    assert _circle(graph) == []


def _circle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of the graph (its modules in order), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target) :]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_circle_check_finds_one() -> None:
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c"]
    assert _circle({"a": {"b"}, "b": set()}) == []
