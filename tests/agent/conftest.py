"""Run ``kgpu agent`` as a subprocess against the fake kubelet."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kgpu.testing.agent_process import AgentProcess
from kgpu.testing.fake_kubelet import FakeKubelet


@pytest.fixture
def kubelet(root: Path) -> Iterator[FakeKubelet]:
    with FakeKubelet(root) as fake:
        yield fake


@pytest.fixture
def start_agent(root: Path) -> Iterator[Callable[..., AgentProcess]]:
    started: list[AgentProcess] = []

    def start(*args: str) -> AgentProcess:
        agent = AgentProcess(root, list(args), node_name="node-a")
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.kill()
        if os.environ.get("KGPU_TEST_AGENT_LOG"):
            print(agent.log())
