"""capture/values.py registers its frames with Dynamo only once Dynamo is imported
(`_after_import`), so a captured program that never compiles never pays for importing it."""

from __future__ import annotations

import importlib
import sys

import pytest

from cachalot.capture import values


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package `hookpkg` with a submodule `late` that is not imported yet."""
    root = tmp_path / "hookpkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "late.py").write_text("VALUE = 7\n\ndef f():\n    return VALUE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    finders = list(sys.meta_path)
    yield "hookpkg.late"
    sys.meta_path[:] = finders
    for name in ("hookpkg.late", "hookpkg"):
        sys.modules.pop(name, None)


def test_the_callback_runs_after_the_module_is_executed_and_the_hook_goes(package):
    seen = []
    values._after_import(package, lambda: seen.append(sys.modules[package].VALUE))
    assert seen == []  # nothing imported it yet
    late = importlib.import_module(package)
    assert seen == [7]  # once, with the module's body run
    assert not any(isinstance(f, values._AfterImport) for f in sys.meta_path)
    # the module is Python's own: its loader still gives its source (tracebacks show lines)
    assert "return VALUE" in late.__loader__.get_source(package)
    importlib.reload(late)
    assert seen == [7]


def test_an_imported_module_gets_the_callback_at_once(package):
    importlib.import_module(package)
    seen = []
    values._after_import(package, lambda: seen.append(True))
    assert seen == [True]
    assert not any(isinstance(f, values._AfterImport) for f in sys.meta_path)


def test_other_imports_pass_through_untouched(package):
    seen = []
    values._after_import(package, lambda: seen.append(True))
    importlib.import_module("hookpkg")  # the parent only
    assert seen == []
    assert any(isinstance(f, values._AfterImport) for f in sys.meta_path)
