"""The IMEX daemon directory is shared by the privileged agent and a pod: what a container
could leave there (a FIFO, a symlink to /dev/zero) must not stall or inflate the agent, and a
daemon claim gets a domain's directory only when the controller made it (issue 28, High)."""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_node_cd import CLIQUE, _claim, _clique, _domain, _node, _prepare

from kgpu.drivers.computedomain import ComputeDomainHandler
from kgpu.hardware import read_machine
from kgpu.kubelet.dra.handler import ClaimError, ClaimRef
from kgpu.kubelet.dra.plugin import DraPlugin, claim_info
from kgpu.store import MemoryStore

DAEMON = "ComputeDomainDaemonConfig"
CHANNEL = "ComputeDomainChannelConfig"


@pytest.fixture
def node(tmp_path: Path) -> tuple[MemoryStore, DraPlugin, ComputeDomainHandler]:
    store = MemoryStore()
    _node(store, "n0", "10.0.0.1")
    handler = ComputeDomainHandler("n0", store, tmp_path / "plugin", clique=CLIQUE)
    return store, DraPlugin(handler, tmp_path / "plugin", tmp_path / "cdi", store), handler


def _finishes(fn: Callable[[], Any], within_s: float = 5.0) -> Any:
    """``fn()``'s result, failing (not hanging) when it does not return in time: the thread is
    a daemon, so a blocked open of a FIFO cannot keep the test run alive."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(within_s)
    assert not thread.is_alive(), f"{fn} blocked for {within_s} s"
    return out[0] if out else None


def test_a_fifo_in_place_of_hosts_blocks_neither_sync_nor_prepare_nor_unprepare(
    node: Any, tmp_path: Path
) -> None:
    store, plugin, handler = node
    a, b = _domain(store, "a"), _domain(store, "b")
    _clique(store, a, [("n0", "10.0.0.1", 0)])
    assert not _prepare(plugin, _claim("a-d", "u1", "daemon-0", a, DAEMON)).error
    hosts = handler.domain_dir(a) / "hosts"
    hosts.unlink()
    os.mkfifo(hosts)  # what a root container with the directory writable could do
    (handler.domain_dir(a) / "imexd.cfg.tmpl").unlink()
    os.mkfifo(handler.domain_dir(a) / "imexd.cfg.tmpl")

    _clique(store, a, [("n0", "10.0.0.1", 0), ("n1", "10.0.0.2", 1)])
    assert _finishes(handler.sync_daemons) == [a]
    assert stat.S_ISREG(hosts.lstat().st_mode)
    assert hosts.read_text().count("compute-domain-daemon-") == 2
    # the node's other claims go on, and the daemon claim can be prepared again
    result = _finishes(lambda: _prepare(plugin, _claim("b-ch", "u2", "channel-0", b, CHANNEL)))
    assert not result.error
    # a restarted daemon pod's new claim rewrites the files
    again = _finishes(lambda: _prepare(plugin, _claim("a-d2", "u3", "daemon-0", a, DAEMON)))
    assert not again.error
    assert stat.S_ISREG((handler.domain_dir(a) / "imexd.cfg.tmpl").lstat().st_mode)
    os.mkfifo(handler.domain_dir(a) / "left-behind")
    refs = [ClaimRef("nvidia-dra-driver-gpu", u, n) for u, n in (("u1", "a-d"), ("u3", "a-d2"))]
    _finishes(lambda: plugin.unprepare(refs))
    assert not handler.domain_dir(a).exists()


def test_a_symlink_to_dev_zero_is_replaced_never_read(node: Any) -> None:
    store, plugin, handler = node
    a = _domain(store, "a")
    _clique(store, a, [("n0", "10.0.0.1", 0)])
    assert not _prepare(plugin, _claim("a-d", "u1", "daemon-0", a, DAEMON)).error
    hosts = handler.domain_dir(a) / "hosts"
    hosts.unlink()
    hosts.symlink_to("/dev/zero")
    _clique(store, a, [("n0", "10.0.0.1", 0), ("n1", "10.0.0.2", 1)])
    started = time.monotonic()
    assert _finishes(handler.sync_daemons) == [a]
    assert time.monotonic() - started < 2.0
    assert not hosts.is_symlink() and hosts.read_text().count("\n") == 2


def test_the_daemon_directory_is_mounted_read_only_and_made_0750_whatever_the_umask(
    node: Any, tmp_path: Path
) -> None:
    store, plugin, handler = node
    a = _domain(store, "a")
    old = os.umask(0)
    try:
        assert not _prepare(plugin, _claim("a-d", "u1", "daemon-0", a, DAEMON)).error
    finally:
        os.umask(old)
    assert stat.S_IMODE(handler.domain_dir(a).stat().st_mode) == 0o750
    assert stat.S_IMODE(handler.domain_dir(a).parent.stat().st_mode) == 0o750
    (spec,) = (tmp_path / "cdi").glob("*u1*")
    (device,) = yaml.safe_load(spec.read_text())["devices"]
    (mount,) = device["containerEdits"]["mounts"]
    assert mount["containerPath"] == "/imexd" and "ro" in mount["options"]
    assert "rw" not in mount["options"]


def test_a_daemon_claim_outside_the_controller_namespace_is_refused(node: Any) -> None:
    """``compute-domain-daemon.nvidia.com`` is cluster-wide: any tenant can allocate it."""
    store, _, handler = node
    victim = _domain(store, "victim")
    claim = _claim("steal", "u1", "daemon-0", victim, DAEMON)
    claim["metadata"]["namespace"] = "tenant-b"
    with pytest.raises(ClaimError, match="controller's namespace 'nvidia-dra-driver-gpu'"):
        handler.prepare(claim_info(claim, "compute-domain.nvidia.com"))
    assert not handler.domain_dir(victim).exists()


def test_a_daemon_claim_not_made_from_the_domains_template_is_refused(node: Any) -> None:
    store, _, handler = node
    a, b = _domain(store, "a"), _domain(store, "b")
    unlabelled = _claim("x", "u1", "daemon-0", a, DAEMON)
    del unlabelled["metadata"]["labels"]
    with pytest.raises(ClaimError, match="not made from its daemon claim template"):
        handler.prepare(claim_info(unlabelled, "compute-domain.nvidia.com"))
    other = _claim("y", "u2", "daemon-0", a, DAEMON)
    other["metadata"]["labels"]["resource.nvidia.com/computeDomain"] = b
    with pytest.raises(ClaimError, match="not made from its daemon claim template"):
        handler.prepare(claim_info(other, "compute-domain.nvidia.com"))
    assert not handler.domain_dir(a).exists()


def test_the_agent_prepares_daemon_claims_of_its_own_namespace(tmp_path: Path) -> None:
    """The chart runs agent and controller in the release namespace: the agent's namespace
    is where daemon claims come from."""
    from kgpu.agent.components import load_dra
    from kgpu.hardware import open_backend

    dra = load_dra(
        tmp_path / "k",
        tmp_path / "cdi",
        "n0",
        open_backend("gb200", clique=CLIQUE),
        store=MemoryStore(),
        namespace="kgpu-system",
    )
    (factory,) = dra.driver_factories  # type: ignore[attr-defined]
    handler = factory("n0", MemoryStore(), read_machine("gb200", clique=CLIQUE), tmp_path)
    assert handler is not None and handler.daemon_namespace == "kgpu-system"
