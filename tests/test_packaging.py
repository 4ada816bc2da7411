"""The package declares what it imports: a module imported by ``src/vidax`` but missing from
``pyproject.toml``'s dependencies works on a developer's machine (the test extra pulls it in) and fails
for a user (Pillow was missing: every ``--image`` run failed with ModuleNotFoundError)."""

import ast
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Import name -> distribution name, where they differ.
DISTRIBUTIONS = {"PIL": "pillow", "ml_dtypes": "ml-dtypes"}
# Imported but not required: optional where installed (guarded by `except ImportError`), or reference tooling
# that tests run (torch writes the original release's .pth fixtures; the package runs without it).
OPTIONAL = {"ftfy", "torch"}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_modules() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (REPO / "src" / "vidax").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top != "vidax" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_third_party_import_is_a_declared_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_normalise(re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0]) for d in project["dependencies"]}
    imported = _imported_modules()
    assert "PIL" in imported and "av" in imported  # the scan sees the package's imports
    missing = {m: sorted(files) for m, files in imported.items()
               if m not in OPTIONAL and _normalise(DISTRIBUTIONS.get(m, m)) not in declared}
    assert not missing, f"imported but not in [project].dependencies: {missing}"
