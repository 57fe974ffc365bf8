"""Layers only point down: app/ -> actors/ -> storage/, with common/ usable by all and importing none."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
FORBIDDEN = {
    "actors": {"aiohttp", "aiohttp_session", "app"},
    "storage": {"aiohttp", "aiohttp_session", "app", "actors"},
    "common": {"aiohttp", "aiohttp_session", "app", "actors", "storage"},
}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(package):
    offenders = {str(path.relative_to(ROOT)): sorted(_imports(path) & FORBIDDEN[package])
                 for path in sorted((ROOT / package).rglob("*.py"))}
    assert {path: found for path, found in offenders.items() if found} == {}
