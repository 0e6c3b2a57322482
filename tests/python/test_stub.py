"""The checked-in stub `cachalot/_native.pyi` says what the Rust module really exports: mypy's
stubtest compares every name, signature and class in it with the built module."""

import subprocess
import sys

from conftest import package_env


def test_native_stub_matches_the_module():
    p = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "cachalot._native"],
        env=package_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
