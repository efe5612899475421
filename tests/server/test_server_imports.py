"""Who may import the server, and the one way its admission path's modules depend on each other.

Every import under webhook/ is parsed (those inside functions included). Only the commands (and
the CLI) import webhook.server: the policy check speaks the AdmissionReview codec of webhook.review,
so webhook.server may import webhook.policies at the top, with no lazy import to hide a circle.
On the admission path the arrows run one way: pipeline -> offload -> sequence -> context.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER = "webhook.server"
MAY_IMPORT_THE_SERVER = ("webhook.commands", "webhook.cli")
# module -> the server modules it must not import (they sit above it on the admission path)
ABOVE = {
    "webhook.server.context": {"sequence", "offload", "pipeline", "app"},
    "webhook.server.sequence": {"offload", "pipeline", "app"},
    "webhook.server.offload": {"pipeline", "app"},
    "webhook.server.pipeline": {"app"},
}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted((ROOT / "webhook").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _imports(module: str, tree: ast.Module) -> Iterator[tuple[int, str, bool]]:
    """(line, imported name, at the top) for each import of `tree`, relative ones resolved."""
    is_package = (ROOT / Path(*module.split(".")) / "__init__.py").exists()
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, id(node) in top
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = package[: len(package) - node.level + 1]
                source = ".".join([*base, *([source] if source else [])])
            for alias in node.names:
                yield node.lineno, f"{source}.{alias.name}" if source else alias.name, id(node) in top


def test_only_the_commands_import_the_server() -> None:
    found = [
        f"{module}:{line}: {name}"
        for module, tree in _modules()
        if not module.startswith((SERVER, *MAY_IMPORT_THE_SERVER))
        for line, name, _ in _imports(module, tree)
        if name == SERVER or name.startswith(SERVER + ".")
    ]
    assert not found, "import webhook.server outside the commands:\n" + "\n".join(found)


def test_the_server_imports_the_policies_at_the_top() -> None:
    lazy = [
        f"{module}:{line}: {name}"
        for module, tree in _modules()
        if module.startswith(SERVER)
        for line, name, at_top in _imports(module, tree)
        if name.startswith("webhook.policies") and not at_top
    ]
    assert not lazy, "webhook.policies imported inside a function (a hidden circle?):\n" + "\n".join(lazy)


def test_the_admission_path_depends_one_way() -> None:
    modules = dict(_modules())
    back = [
        f"{module}:{line}: {name}"
        for module, forbidden in ABOVE.items()
        for line, name, _ in _imports(module, modules[module])
        if name.startswith(SERVER + ".") and name.split(".")[2] in forbidden
    ]
    assert not back, "an arrow back up the admission path:\n" + "\n".join(back)
