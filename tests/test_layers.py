"""The layer rules of docs/architecture.md, checked by import-linter's contracts in pyproject.toml."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_layers_import_only_downwards_and_the_format_layer_knows_no_torch():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(lint).exists():
        pytest.fail("import-linter is a test dependency; install the test extras")
    result = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_module_imports_itself_through_others():
    """No import circles between pterun's modules (type-checking imports included): each module can be
    read, changed and tested knowing only what it imports."""
    import grimp

    graph = grimp.build_graph("pterun")
    assert len(graph.modules) > 50  # the premise: the whole package was read
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported != module and graph.chain_exists(importer=imported, imported=module):
                cycles.append((module, imported))
    assert not cycles, f"import circles: {cycles[:5]}"
