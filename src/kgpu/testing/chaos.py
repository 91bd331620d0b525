"""A bounded chaos run against the agent: random crashes and restarts, socket deletions,
kubelet restarts, hung and refusing kubelets, bad fault files, config swaps and a second agent
on the same root, with the agent's promises checked after every step.

The agent is ``kgpu agent`` on the four-resource node of :mod:`kgpu.testing.split_node`, as its
own process (SIGKILL for a crash, SIGTERM at the end), XIDs injected through its
``--fault-dir``; the fake kubelet runs here. After each step the run lets the system settle
and checks:

* **every healthy device listed**: within ``settle_s`` the kubelet lists the four resources
  with the devices the current config gives, all Healthy (Unhealthy GPUs recover after the
  agent's short quiet period);
* **no duplicate registration**: once settled, no Register call arrives for ``quiet_s``
  (nothing re-registers what the kubelet already has), and each resource has one endpoint;
* **health within the bound**: an XID reaches ListAndWatch within ``health_bound_s`` of the
  agent applying its fault file (the ``.done`` rename, watched every millisecond), also while
  a Register call hangs;
* **nothing leaked**: only the kubelet's and the agent's current sockets in
  ``device-plugins/``; the agent's open files and threads stay within a margin of what the same
  process had at its first settle; every fault file was answered (``.done`` / ``.error``).

Every violation is collected with the step that caused it; the run never stops at the first.
``run_chaos`` is what ``tests/agent/test_agent_chaos.py`` calls for a few seconds and what
``bench/agent.py --chaos-seconds N`` calls for a long run (RSS sampled along the way).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from kgpu.kubelet.deviceplugin.server import socket_name
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.split_node import (
    GPU_RESOURCE,
    MACHINE,
    NODE,
    RESOURCES,
    gpu_uuids,
    replicas_of,
    split_config,
)

ACTIONS = (
    "xid",
    "delete_socket",
    "kubelet_restart",
    "hang",
    "refuse",
    "bad_fault",
    "config_swap",
    "kill",
    "second_agent",
)

BAD_FAULTS = (
    '{"xid": 79, "gpu": 99}',
    '{"xid": 79, "gpu": "MIG-00000000-0000-0000-0000-000000000000"}',
    '{"xid": "79", "gpu": 0}',
    '[{"xid": 79, "gpu": 6}, {"gpu": 1}]',
    "{truncated",
    "\xff\xfe",
)

#: Short enough that a GPU marked Unhealthy recovers between two chaos steps.
QUIET_PERIOD_S = 0.5
PROBE_INTERVAL_S = 0.2
#: Margins over the agent's first settled state: gRPC pools grow a little with load.
FD_MARGIN = 16
THREAD_MARGIN = 16


@dataclass
class ChaosReport:
    seed: int
    seconds: float = 0.0
    steps: Counter[str] = field(default_factory=Counter)
    health_s: list[float] = field(default_factory=list)
    registrations: int = 0
    agents_started: int = 0
    rss_kib: list[tuple[float, int]] = field(default_factory=list)  # (seconds, VmRSS)
    violations: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        health = sorted(self.health_s)
        return {
            "seed": self.seed,
            "seconds": round(self.seconds, 1),
            "steps": dict(self.steps),
            "health_ms": {
                "count": len(health),
                "max": round(health[-1] * 1000, 1) if health else None,
                "p50": round(health[len(health) // 2] * 1000, 1) if health else None,
            },
            "registrations": self.registrations,
            "agents_started": self.agents_started,
            "rss_mib_first_last": (
                [round(self.rss_kib[0][1] / 1024, 1), round(self.rss_kib[-1][1] / 1024, 1)]
                if self.rss_kib
                else None
            ),
            "violations": self.violations,
        }


class _AgentProc:
    """One ``kgpu agent`` child on the chaos root."""

    def __init__(
        self,
        root: Path,
        log: IO[str],
        *,
        launcher: Sequence[str] = ("-m", "kgpu"),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root
        self.proc = subprocess.Popen(
            [sys.executable, *launcher, "agent", "--machine", MACHINE, "--node-name", NODE,
             "--config", str(root / "split.yaml"), "--kubelet-root", str(root), "--no-dra",
             "--fault-dir", str(root / "faults"), "--status-file", str(root / "status.json"),
             "--health-quiet-period", str(QUIET_PERIOD_S),
             "--health-probe-interval", str(PROBE_INTERVAL_S)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={**os.environ, **env} if env else None,
        )  # fmt: skip
        self.baseline: tuple[int, int] | None = None  # (fds, threads) at its first settle

    def ready(self, timeout_s: float = 30.0) -> bool:
        """The agent wrote its status file (the end of its start)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                status = json.loads((self.root / "status.json").read_text())
                if status.get("pid") == self.proc.pid and status.get("state") == "running":
                    return True
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        return False

    def counts(self) -> tuple[int, int]:
        pid = self.proc.pid
        return len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9


class Chaos:
    def __init__(
        self,
        root: Path,
        *,
        seed: int,
        seconds: float,
        health_bound_s: float = 1.0,
        settle_s: float = 15.0,
        quiet_s: float = 0.3,
        log_path: Path | None = None,
        rss_every_s: float = 0.0,
        pause_s: float = 0.0,
        actions: tuple[str, ...] = ACTIONS,
        max_steps: int = 0,
        after_step: Callable[[Chaos], None] | None = None,  # also once before the first
        agent_launcher: Sequence[str] = ("-m", "kgpu"),
        agent_env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.seconds = seconds
        self.health_bound_s = health_bound_s
        self.settle_s = settle_s
        self.quiet_s = quiet_s
        self.rss_every_s = rss_every_s
        self.pause_s = pause_s  # between steps: a long run at low intensity
        self.actions = actions
        # a fixed number of steps instead of (not as well as) ``seconds``: one action repeated
        # N times is how bench/agent.py attributes RSS growth to an action
        self.max_steps = max_steps
        self.after_step = after_step
        # how the agent process is started: ``python <launcher> agent ...`` with ``agent_env``
        # added (bench/agent_probe.py wraps the CLI to report from inside the process)
        self.agent_launcher = tuple(agent_launcher)
        self.agent_env = dict(agent_env or {})
        self.report = ChaosReport(seed=seed)
        self.kubelet = FakeKubelet(root, hang_limit_s=10.0)
        self.replicas_a = 2
        self.faults = 0
        self._log = (log_path or root / "chaos-agent.log").open("a")
        self.agent: _AgentProc | None = None
        self.step = "start"
        self.uuids = gpu_uuids()

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> ChaosReport:
        (self.root / "split.yaml").write_text(split_config(self.replicas_a))
        (self.root / "faults").mkdir(exist_ok=True)
        started = time.monotonic()
        last_rss = 0.0
        self.kubelet.start()
        try:
            self._start_agent()
            self._check()
            if self.after_step is not None:  # once settled, before any action
                self.after_step(self)
            # every action once, in a random order, then random ones until the time is up
            plan = list(self.actions)
            self.rng.shuffle(plan)
            while (
                sum(self.report.steps.values()) < self.max_steps
                if self.max_steps
                else plan or time.monotonic() - started < self.seconds
            ):
                action = plan.pop() if plan else self.rng.choice(self.actions)
                self.step = f"{action} #{self.report.steps[action] + 1}"
                self.report.steps[action] += 1
                getattr(self, f"_do_{action}")()
                self._check()
                if self.pause_s:
                    time.sleep(self.pause_s)
                now = time.monotonic() - started
                if (
                    self.rss_every_s
                    and self.agent is not None
                    and now - last_rss >= self.rss_every_s
                ):
                    self.report.rss_kib.append((now, self.agent.rss_kib()))
                    last_rss = now
                if self.after_step is not None:
                    self.after_step(self)
        finally:
            if self.agent is not None:
                code = self.agent.stop()
                if code != 0:
                    self._violation(f"the agent exited {code} on SIGTERM, not 0")
            self.kubelet.stop()
            self._log.close()
        self.report.seconds = time.monotonic() - started
        self.report.registrations = len(self.kubelet.registrations)
        leftover = sorted(p.name for p in (self.root / "device-plugins").glob("kgpu-*.sock"))
        if leftover:
            self._violation(f"sockets left after a clean stop: {leftover}")
        return self.report

    def _violation(self, text: str) -> None:
        self.report.violations.append(f"{self.step}: {text}")

    def _start_agent(self) -> None:
        self.agent = self._agent_proc()
        self.report.agents_started += 1
        if not self.agent.ready():
            self._violation("the agent did not start")

    def _agent_proc(self) -> _AgentProc:
        return _AgentProc(self.root, self._log, launcher=self.agent_launcher, env=self.agent_env)

    # -- actions ---------------------------------------------------------------------------------

    def _healthy_gpu(self, exclude: str = "") -> int | None:
        candidates = [
            gpu
            for gpu, resource in GPU_RESOURCE.items()
            if resource != exclude
            and self._replicas(gpu)
            and set(self._replicas(gpu).values()) == {"Healthy"}
        ]
        return self.rng.choice(candidates) if candidates else None

    def _replicas(self, gpu: int) -> dict[str, str]:
        return replicas_of(self.kubelet.devices(GPU_RESOURCE[gpu]), self.uuids[gpu])

    def _measure_health(self, exclude: str = "") -> None:
        gpu = self._healthy_gpu(exclude)
        if gpu is None or self.agent is None:
            return
        self.faults += 1
        name = f"x{self.faults:05d}.json"
        faults = self.root / "faults"
        (faults / f".{name}").write_text(json.dumps({"xid": 79, "gpu": gpu}))
        (faults / f".{name}").rename(faults / name)
        done = faults / f"{name}.done"
        deadline = time.monotonic() + 5.0
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.001)
        started = time.perf_counter()  # the agent injected it just before the rename
        seen = self.kubelet.wait_for(
            lambda: set(self._replicas(gpu).values()) == {"Unhealthy"}, 5.0
        )
        took = time.perf_counter() - started
        self.report.health_s.append(took if seen else float("inf"))
        if not seen or took > self.health_bound_s:
            self._violation(f"XID on GPU {gpu} reached ListAndWatch in {took:.3f} s")

    def _do_xid(self) -> None:
        self._measure_health()

    def _registered_again(self, resource: str, after: int) -> None:
        """Wait for ``resource`` to register again: the kubelet keeps streaming from a server
        whose socket file was deleted, so only the new registration says it was noticed."""
        kubelet = self.kubelet
        if not kubelet.wait_for(
            lambda: any(r == resource for r, _ in kubelet.registrations[after:]), 10.0
        ):
            self._violation(f"{resource} was not registered again after its socket vanished")

    def _do_delete_socket(self) -> None:
        victim = self.rng.choice(RESOURCES)
        before = len(self.kubelet.registrations)
        (self.root / "device-plugins" / socket_name(victim)).unlink(missing_ok=True)
        self._registered_again(victim, before)

    def _do_kubelet_restart(self) -> None:
        self.kubelet.restart(wipe=self.rng.random() < 0.7)

    def _do_hang(self) -> None:
        self.kubelet.register_mode = "hang"
        victim = self.rng.choice(RESOURCES)
        before = len(self.kubelet.registrations)
        (self.root / "device-plugins" / socket_name(victim)).unlink(missing_ok=True)
        time.sleep(self.rng.uniform(0.1, 0.4))  # its Register is hanging now
        self._measure_health(exclude=victim)
        self.kubelet.register_mode = "ok"
        self._registered_again(victim, before)

    def _do_refuse(self) -> None:
        self.kubelet.register_mode = "refuse"
        self.kubelet.restart(wipe=self.rng.random() < 0.5)
        time.sleep(self.rng.uniform(0.2, 0.8))
        self.kubelet.register_mode = "ok"

    def _do_bad_fault(self) -> None:
        self.faults += 1
        name = f"b{self.faults:05d}.json"
        tmp = self.root / "faults" / f".{name}.tmp"
        tmp.write_bytes(self.rng.choice(BAD_FAULTS).encode("utf-8", "surrogateescape"))
        tmp.rename(self.root / "faults" / name)

    def _do_config_swap(self) -> None:
        config = self.root / "split.yaml"
        if self.rng.random() < 0.3:  # a bad config: the last good one keeps serving
            config.write_text(split_config(self.replicas_a).replace("replicas: 2", "replicas: -1"))
            time.sleep(0.4)
        self.replicas_a = 3 if self.replicas_a == 2 else 2
        config.write_text(split_config(self.replicas_a))

    def _do_kill(self) -> None:
        assert self.agent is not None
        self.agent.kill()
        self._start_agent()

    def _do_second_agent(self) -> None:
        second = self._agent_proc()
        try:
            code = second.proc.wait(30)
        except subprocess.TimeoutExpired:
            second.kill()
            self._violation("a second agent on the same root kept running")
            return
        if code != 1:
            self._violation(f"a second agent on the same root exited {code}, not 1")

    # -- invariants ------------------------------------------------------------------------------

    def _expected(self) -> dict[str, int]:
        return {
            "nvidia.com/gpu": 2,
            "nvidia.com/gpu.a": 2 * self.replicas_a,
            "nvidia.com/gpu.b": 4,
            "nvidia.com/gpu.c": 4,
        }

    def _settled(self) -> bool:
        kubelet = self.kubelet
        expected = self._expected()
        if kubelet.resources() != sorted(expected):
            return False
        for resource, count in expected.items():
            devices = kubelet.devices(resource)
            if len(devices) != count or set(devices.values()) != {"Healthy"}:
                return False
        return not list((self.root / "faults").glob("*.json"))

    def _check(self) -> None:
        kubelet = self.kubelet
        if not kubelet.wait_for(self._settled, self.settle_s):
            seen = {r: kubelet.devices(r) for r in kubelet.resources()}
            self._violation(
                f"not settled in {self.settle_s} s: kubelet has "
                f"{ {r: [*sorted(set(d.values())), len(d)] for r, d in seen.items()} }, "
                f"expected {self._expected()}"
            )
            return
        before = len(kubelet.registrations)
        time.sleep(self.quiet_s)
        if len(kubelet.registrations) != before:
            self._violation(f"registered again while settled: {kubelet.registrations[before:]}")
        plugin_dir = self.root / "device-plugins"
        sockets = {p.name for p in plugin_dir.iterdir() if p.name.endswith(".sock")}
        wanted = {"kubelet.sock", *(socket_name(r) for r in RESOURCES)}
        if sockets != wanted:
            self._violation(f"sockets {sorted(sockets ^ wanted)} differ from the agent's")
        if self.agent is not None and self.agent.proc.poll() is None:
            counts = self.agent.counts()
            if self.agent.baseline is None:
                self.agent.baseline = counts
            elif counts[0] > self.agent.baseline[0] + FD_MARGIN:
                self._violation(f"open files grew from {self.agent.baseline[0]} to {counts[0]}")
            elif counts[1] > self.agent.baseline[1] + THREAD_MARGIN:
                self._violation(f"threads grew from {self.agent.baseline[1]} to {counts[1]}")
        elif self.agent is not None:
            self._violation(f"the agent exited ({self.agent.proc.returncode})")
        status = json.loads((self.root / "status.json").read_text())
        if status.get("state") != "running":
            self._violation(f"status file says {status.get('state')!r}")


def run_chaos(root: Path, *, seed: int, seconds: float, **options: object) -> ChaosReport:
    """One chaos run under ``root`` (a short path: unix sockets live there)."""
    return Chaos(root, seed=seed, seconds=seconds, **options).run()  # type: ignore[arg-type]
