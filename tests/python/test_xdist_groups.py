"""Under `scripts/test.sh` (pytest-xdist, `--dist loadgroup`) the tests that share a workload
are sent to one worker by their `xdist_group` mark (conftest.py marks a module's tests that use
one of its module-scoped fixtures; test_capture_ranks marks the tests of one cached job). If the
mark stops reaching the scheduler, nothing fails but every worker runs those workloads again:
pytest 9.2 with pytest-xdist 3.8 did that (scripts/python_env.sh keeps pytest below 9.2)."""

import pytest


@pytest.mark.xdist_group("xdist-self-check")
def test_an_xdist_group_reaches_the_scheduler(request):
    if not getattr(request.config.option, "loadgroup", False):  # set on xdist's workers
        pytest.skip("not run with pytest-xdist's --dist loadgroup")
    assert request.node.nodeid.endswith("@xdist-self-check"), (
        f"{request.node.nodeid}: xdist's loadgroup no longer sees xdist_group marks with "
        f"pytest {pytest.__version__}; pin a pytest it works with in scripts/python_env.sh"
    )


@pytest.fixture(scope="module")
def shared_workload():
    """A module-scoped fixture of this module: conftest.py groups the tests that use it."""
    return object()


def test_a_modules_shared_workload_keeps_its_tests_on_one_worker(request, shared_workload):
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run with pytest-xdist's --dist loadgroup")
    assert request.node.nodeid.endswith(f"@{request.module.__name__}"), (
        f"{request.node.nodeid}: conftest.py's group mark came after xdist tagged the node id"
    )
