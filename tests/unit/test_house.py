"""The house rule, checked: which package may import which (docs/design.md, "The house").

``boost`` is the library and needs torch alone: it never imports torchtitan or ``torchtitan_ext``,
and its other third-party imports are the few that reading and exporting a trained model need,
each confined to the modules that use it. ``torchtitan_ext`` (registration and glue) may import
both. Inside the library, the model knows nothing of parallelism, and ``boost.rules`` (the one home
of every rule) depends on nothing. Checked on the source (every ``import``, at any depth of a
function) and on a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}

# Third-party packages the library may import besides torch, and the only modules that may.
LIBRARY_EXTRAS = {
    "safetensors": ("boost/interop/read.py", "boost/interop/write.py"),
    "tokenizers": ("boost/data/", "boost/trained_run.py", "boost/evaluate.py", "boost/hf_folder.py"),
    "tqdm": ("boost/evaluate.py", "boost/data/prepare/progress_report.py"),
    # .parquet corpora (pulled in by torchtitan's datasets)
    "pyarrow": ("boost/data/local_files.py", "boost/data/prepare/document_reader.py"),
    "tomli": ("boost/",),  # stdlib tomllib's backport, for Python < 3.11
    # The exported folder's remote code and the optional lm-eval bridge (imported lazily).
    "transformers": ("boost/hf/", "boost/lm_eval_local.py"),
    "lm_eval": ("boost/lm_eval_local.py",),
}
# Inside the library: (importer prefix, imported module prefix) pairs that must not occur.
FORBIDDEN_INSIDE = [
    ("boost/model/", "boost.parallel"),  # model code knows nothing of parallelism
    ("boost/rules.py", "boost."),  # the rules depend on nothing
    ("boost/rules.py", "torch"),
]


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, at any depth (function-level imports included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


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
        if path.relative_to(ROOT).as_posix().startswith(importer) and (module + ".").startswith(imported)
    ]
    assert not broken, "\n".join(broken)


def test_the_scanner_sees_function_level_imports(tmp_path):
    # a function-level import of torchtitan_ext: the kind the library must never make
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import torch\n\ndef f():\n    from torchtitan_ext.data import ensure_stdlib_tokenizer\n"
    )
    assert imported_modules(sample) == [(1, "torch"), (4, "torchtitan_ext.data")]


@pytest.mark.slow
def test_importing_the_whole_library_loads_no_torchtitan():
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in library_files()
        if p.name != "__main__.py" and "boost/hf/" not in p.as_posix() and p.name != "lm_eval_local.py"
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
            if folder == "hf":  # the exported folder's remote code, listed as one entry
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
