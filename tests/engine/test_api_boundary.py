"""The engine's `__init__` is its API: the doors import from `webhook.engine` only.

Every module under webhook/ outside webhook/engine/, and bench/, is parsed (imports inside
functions included): none may import a module of the engine (`webhook.engine.loader`, or
`from webhook.engine import loader`), nor a name `webhook.engine.__all__` does not list. So the
engine's modules can be split, merged and renamed behind the API without touching a door, and
what the doors depend on is one list, read in one place.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import webhook.engine

ROOT = Path(__file__).resolve().parents[2]
ENGINE = "webhook.engine"


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
    exported = set(webhook.engine.__all__)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(ENGINE + "."):
                    yield f"{module}:{node.lineno}: import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            source = _imported_module(node, module, path)
            if source.startswith(ENGINE + "."):
                names = ", ".join(alias.name for alias in node.names)
                yield f"{module}:{node.lineno}: from {source} import {names}"
            elif source == ENGINE:
                for alias in node.names:
                    if alias.name not in exported:
                        yield f"{module}:{node.lineno}: from {ENGINE} import {alias.name} (not in its __all__)"


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
        "def later():\n"
        "    from ..engine.facts import WorkingCopy\n"
    )
    assert list(engine_imports("webhook.audit.door", door)) == [
        "webhook.audit.door:1: import webhook.engine.cel",
        "webhook.audit.door:2: from webhook.engine.loader import load_rules",
        "webhook.audit.door:3: from webhook.engine import loader (not in its __all__)",
        "webhook.audit.door:5: from webhook.engine.facts import WorkingCopy",
    ]


def test_every_name_of_the_api_exists() -> None:
    missing = [name for name in webhook.engine.__all__ if not hasattr(webhook.engine, name)]
    assert missing == []
    assert len(set(webhook.engine.__all__)) == len(webhook.engine.__all__)
