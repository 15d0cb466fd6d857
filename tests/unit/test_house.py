"""The house rule, checked: which package may import which (docs/design.md, "The house").

``boost`` is the library and needs torch alone: it never imports torchtitan or ``torchtitan_ext``, and
its other third-party imports are the few that reading and exporting a trained model need, each confined
to the modules that use it. ``torchtitan_ext`` (registration and glue) may import both. Inside the
library, the model knows nothing of parallelism, and ``boost.training.rules`` (the one home of every
rule) depends on nothing. Checked on the source (every ``import``, at any depth of a function) and on a
fresh interpreter.

``boost`` is four groups (``MAY_IMPORT``): no import runs up or across them, and no import cycle.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# tomllib: the standard library's from Python 3.11; on 3.10 its import falls back to tomli (LIBRARY_EXTRAS)
STDLIB = set(sys.stdlib_module_names) | {"__future__", "tomllib"}

# Third-party packages the library may import besides torch, and the only modules that may.
LIBRARY_EXTRAS = {
    "safetensors": ("boost/after_training/interop/read.py", "boost/after_training/interop/write.py"),
    "tokenizers": (
        "boost/training/data/",
        "boost/after_training/trained_run.py",
        "boost/after_training/evaluate.py",
        "boost/after_training/hf_folder.py",
    ),
    "tqdm": ("boost/after_training/evaluate.py", "boost/training/data/prepare/progress_report.py"),
    # .parquet corpora (pulled in by torchtitan's datasets)
    "pyarrow": ("boost/training/data/local_files.py", "boost/training/data/prepare/document_reader.py"),
    "tomli": ("boost/",),  # stdlib tomllib's backport, for Python < 3.11
    # The exported folder's remote code and the optional lm-eval bridge (imported lazily).
    "transformers": ("boost/after_training/hf/", "boost/after_training/lm_eval_local.py"),
    "lm_eval": ("boost/after_training/lm_eval_local.py",),
}
# Inside the library: (importer prefix, imported module prefix) pairs that must not occur.
FORBIDDEN_INSIDE = [
    ("boost/training/model/", "boost.training.parallel"),  # model code knows nothing of parallelism
    ("boost/training/rules/", "boost."),  # the rules depend on nothing but one another
    ("boost/training/rules/", "torch"),
]

# The groups of boost/, from the ground up, and the other groups each may import (docs/design.md, "The
# house"). boost/__init__.py, the public API, stands above them all: none of them imports it.
MAY_IMPORT = {
    "runtime": (),  # helpers any process uses
    "training": ("runtime",),  # the library: rules, options, model, parallel, optim, data
    "planning": ("training", "runtime"),  # before a run: perf model, layout planner, comm volumes
    "after_training": ("training", "runtime"),  # a finished run read back, sampled, scored, exported
}


def imported_modules(path: Path, package: str | None = None) -> list[tuple[int, str]]:
    """Every module ``path`` imports, at any depth (function-level imports included), relative imports
    resolved against ``package`` (by default the file's own, from its place under the repository)."""
    if package is None:
        package = ".".join(path.relative_to(ROOT).parts[:-1])
    found = []
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            # `from . import x` imports the submodule x (or a name of the package: the package then)
            found += [(node.lineno, base if node.module else f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports":
            # boost.runtime.lazy_exports(name, {export: module}): imports made on first use, by name
            found += [(node.lineno, module) for module in _lazy_export_modules(node, tree)]
    return found


def _lazy_export_modules(call: ast.Call, tree: ast.Module) -> list[str]:
    """The module names of a ``lazy_exports`` call's map, written inline or as a module-level dict."""
    mapping = call.args[1] if len(call.args) > 1 else None
    if isinstance(mapping, ast.Name):  # a dict assigned at module level
        mapping = next(
            n.value
            for n in tree.body
            if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == mapping.id for t in n.targets)
        )
    assert isinstance(mapping, ast.Dict), (
        f"line {call.lineno}: lazy_exports' map is not a dict the scanner reads"
    )
    return [v.value for v in mapping.values if isinstance(v, ast.Constant)]


def library_files() -> list[Path]:
    return sorted((ROOT / "boost").rglob("*.py"))


def test_the_library_imports_torch_and_only_the_extras_it_declares():
    broken = []
    for path in library_files():
        name = path.relative_to(ROOT).as_posix()
        for line, module in imported_modules(path):
            top = module.split(".")[0]
            if top in STDLIB or top in ("torch", "boost"):
                continue
            allowed = LIBRARY_EXTRAS.get(top, ())
            if not any(name.startswith(prefix) for prefix in allowed):
                broken.append(f"{name}:{line} imports {module}")
    assert not broken, "boost/ imports torch (and the extras in LIBRARY_EXTRAS) only:\n" + "\n".join(broken)


def test_no_forbidden_import_inside_the_library():
    broken = [
        f"{path.relative_to(ROOT).as_posix()}:{line} imports {module}"
        for path in library_files()
        for line, module in imported_modules(path)
        for importer, imported in FORBIDDEN_INSIDE
        if path.relative_to(ROOT).as_posix().startswith(importer)
        and (module + ".").startswith(imported)
        and not (importer == "boost/training/rules/" and module.startswith("boost.training.rules."))
    ]
    assert not broken, "\n".join(broken)


def test_the_scanner_sees_function_level_imports(tmp_path):
    # a function-level import of torchtitan_ext: the kind the library must never make
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import torch\n\ndef f():\n    from torchtitan_ext.data import ensure_stdlib_tokenizer\n"
    )
    assert imported_modules(sample, "boost.training.model") == [(1, "torch"), (4, "torchtitan_ext.data")]


def test_the_scanner_resolves_relative_imports(tmp_path):
    # relative imports name the library's own modules: the model's reaching into parallel must show
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from ..parallel.styles import NORM_MODES\nfrom . import args\nfrom .model import Transformer\n"
    )
    assert sorted(imported_modules(sample, "boost.training.model")) == [
        (1, "boost.training.parallel.styles"),
        (2, "boost.training.model.args"),
        (3, "boost.training.model.model"),
    ]


def test_the_scanner_sees_lazy_exports(tmp_path):
    # a package's lazy exports import their modules on first use: they count as its imports
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from boost.runtime.lazy_exports import lazy_exports\n"
        "_EXPORTS = {'BoostParallelStyle': 'boost.training.parallel'}\n"
        "__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)\n"
    )
    assert imported_modules(sample, "boost.training.model") == [
        (1, "boost.runtime.lazy_exports"),
        (3, "boost.training.parallel"),
    ]


@pytest.mark.slow
def test_importing_the_whole_library_loads_no_torchtitan():
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in library_files()
        if p.name != "__main__.py"
        and "boost/after_training/hf/" not in p.as_posix()
        and p.name != "lm_eval_local.py"
    )
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('torchtitan', 'torchtitan_ext'))\n"
        "assert not loaded, loaded\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_house_picture_lists_every_file():
    design = (ROOT / "docs" / "design.md").read_text()
    section = design[design.index("## 0. The house") : design.index("## 1. ")]
    picture = section[section.index("```") : section.rindex("```")]
    missing = []
    for package in ("boost", "torchtitan_ext"):
        for path in sorted((ROOT / package).rglob("*.py")):
            folder = path.parent.relative_to(ROOT / package).as_posix()
            if folder == "after_training/hf":  # the exported folder's remote code, listed as one entry
                found = "hf/" in picture
            elif path.name == "__init__.py" and folder != ".":
                continue  # a subpackage is listed by its folder and files
            else:
                found = any(
                    line.split("──")[-1].split()[0] == path.name
                    for line in picture.splitlines()
                    if "──" in line
                )
            if not found:
                missing.append(path.relative_to(ROOT).as_posix())
    assert not missing, f"docs/design.md's house picture does not list: {missing}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_boost_is_its_groups_and_its_public_api():
    top = sorted(
        p.name
        for p in (ROOT / "boost").iterdir()
        if p.suffix == ".py" or (p.is_dir() and any(p.rglob("*.py")))
    )
    assert top == sorted(["__init__.py", *MAY_IMPORT]), f"boost/ holds {top}: a new file belongs in a group"


def test_no_import_runs_up_or_across_the_groups():
    broken = []
    for path in library_files():
        inside = path.relative_to(ROOT / "boost").parts
        if inside == ("__init__.py",):
            continue
        allowed = {inside[0], *MAY_IMPORT.get(inside[0], ())}  # a file in no group: the test above
        for line, module in imported_modules(path):
            parts = module.split(".")
            if parts[0] == "boost" and (len(parts) == 1 or parts[1] not in allowed):
                broken.append(f"{path.relative_to(ROOT).as_posix()}:{line} imports {module}")
    assert not broken, "an import runs up or across boost's groups (MAY_IMPORT):\n" + "\n".join(broken)


def test_each_group_opens_with_its_map():
    missing = []
    for group in MAY_IMPORT:
        folder = ROOT / "boost" / group
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        for p in sorted(folder.iterdir()):
            name = p.stem if p.suffix == ".py" else f"{p.name}/" if any(p.rglob("*.py")) else None
            if name not in (None, "__init__") and f"``{name}``" not in doc:
                missing.append(f"boost/{group}/{p.name}")
    assert not missing, f"not in their group's docstring: {missing}"


def test_no_import_cycle_in_the_library():
    modules = {module_name(p): p for p in library_files()}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for _, imported in imported_modules(path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            targets.add(imported)
        graph[name] = targets - {"", name}
    done, on_path = set(), []

    def cycle_from(name):
        if name in on_path:
            return on_path[on_path.index(name) :] + [name]
        if name in done:
            return None
        on_path.append(name)
        found = next((c for c in map(cycle_from, sorted(graph[name])) if c), None)
        on_path.pop()
        done.add(name)
        return found

    cycle = next((c for c in map(cycle_from, sorted(graph)) if c), None)
    assert cycle is None, " -> ".join(cycle)
