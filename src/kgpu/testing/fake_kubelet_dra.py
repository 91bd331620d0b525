"""A stand-in for the kubelet's DRA manager, speaking the real protocols over real sockets.

It follows what the kubelet does (pkg/kubelet/pluginmanager and pkg/kubelet/cm/dra/plugin), as
far as a DRA plugin can observe:

* The plugin watcher scans ``<root>/plugins_registry/`` for sockets. For a new socket it calls
  ``pluginregistration.Registration/GetInfo``; a type other than ``DRAPlugin`` is refused. The
  DRA handler then picks the first entry of the plugin's ``supported_versions`` that the kubelet
  itself supports (``v1.DRAPlugin``, ``v1beta1.DRAPlugin`` by default; pass ``services`` to play
  an older kubelet), refuses the plugin when there is none or when another plugin of the driver
  already uses the same endpoint, and reports the outcome with ``NotifyRegistrationStatus``.
* A registration socket that disappears deregisters the plugin; one that reappears as a new
  file (an agent restart) registers again, replacing the old entry.
* :meth:`prepare` / :meth:`unprepare` call ``NodePrepareResources`` / ``NodeUnprepareResources``
  of the chosen service on the registered endpoint with only namespace, uid and name per claim,
  as the kubelet does, and return the per-claim map. A gRPC failure is raised (the kubelet then
  retries the whole call later); :meth:`prepare_until_done` retries like the kubelet's pod
  sync loop until every claim succeeded.

It does not model pod admission, the claim-info cache's checkpoint, health streams or wiping
ResourceSlices of a vanished driver.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from kgpu import releases
from kgpu.kubelet.dra.handler import ClaimRef
from kgpu.kubelet.proto.dra.v1 import api_pb2 as v1_pb2
from kgpu.kubelet.proto.dra.v1 import api_pb2_grpc as v1_grpc
from kgpu.kubelet.proto.dra.v1beta1 import api_pb2 as v1beta1_pb2
from kgpu.kubelet.proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from kgpu.kubelet.proto.pluginregistration.v1 import api_pb2 as reg_pb2
from kgpu.kubelet.proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from kgpu.kubelet.sockets import unix_target

#: the newest release's kubelet (kgpu.releases): v1.DRAPlugin, then v1beta1.DRAPlugin
KUBELET_SERVICES = releases.release(releases.NEWEST).kubelet_services
_API = {"v1.DRAPlugin": (v1_pb2, v1_grpc), "v1beta1.DRAPlugin": (v1beta1_pb2, v1beta1_grpc)}


@dataclass
class RegisteredPlugin:
    driver: str
    endpoint: str
    service: str
    socket: Path
    channel: grpc.Channel
    stub: Any
    serial: int = 0  # how many registrations this kubelet had accepted when it took this one


@dataclass(frozen=True)
class Refusal:
    socket: Path
    error: str


class FakeDraKubelet:
    """Plays the kubelet's plugin watcher + DRA manager for one node rooted at ``root``."""

    def __init__(
        self,
        root: Path,
        services: Sequence[str] = KUBELET_SERVICES,
        poll_s: float = 0.05,
        call_timeout_s: float = 10.0,
    ) -> None:
        self.root = Path(root)
        self.registry = self.root / "plugins_registry"
        self.services = tuple(services)
        self.poll_s = poll_s
        self.call_timeout_s = call_timeout_s
        self.plugins: dict[str, RegisteredPlugin] = {}
        self.refusals: list[Refusal] = []
        self.registrations = 0
        self._seen: dict[Path, tuple[int, int]] = {}
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- plugin watcher --------------------------------------------------------------------
    def start(self) -> FakeDraKubelet:
        self.registry.mkdir(parents=True, exist_ok=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="fake-dra-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            for plugin in self.plugins.values():
                plugin.channel.close()
            self.plugins.clear()

    def __enter__(self) -> FakeDraKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.scan()
            self._stop.wait(self.poll_s)

    def scan(self) -> None:
        """One pass of the plugin watcher (also callable directly from tests)."""
        current: dict[Path, tuple[int, int]] = {}
        if self.registry.is_dir():
            for path in self.registry.iterdir():
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                if path.suffix == ".sock" or path.is_socket():
                    current[path] = (st.st_ino, st.st_mtime_ns)
        for path in list(self._seen):
            if path not in current:
                self._deregister(path)
                del self._seen[path]
        for path, ident in current.items():
            if self._seen.get(path) != ident:
                self._seen[path] = ident
                self._register(path)

    def _register(self, socket: Path) -> None:
        try:
            with grpc.insecure_channel(unix_target(socket)) as channel:
                stub = reg_grpc.RegistrationStub(channel)
                info = stub.GetInfo(reg_pb2.InfoRequest(), timeout=self.call_timeout_s)
                error = self._validate(info)
                stub.NotifyRegistrationStatus(
                    reg_pb2.RegistrationStatus(plugin_registered=not error, error=error),
                    timeout=self.call_timeout_s,
                )
        except grpc.RpcError as exc:
            self.refusals.append(Refusal(socket, f"registration call failed: {exc.code()}"))
            self._seen.pop(socket, None)  # retry on the next scan, as the watcher does
            return
        if error:
            self.refusals.append(Refusal(socket, error))
            return
        service = next(s for s in info.supported_versions if s in self.services)
        pb2_grpc = _API[service][1]
        channel = grpc.insecure_channel(unix_target(info.endpoint))
        with self._lock:
            old = self.plugins.pop(info.name, None)
            if old is not None:
                old.channel.close()
            self.registrations += 1
            self.plugins[info.name] = RegisteredPlugin(
                info.name,
                info.endpoint,
                service,
                socket,
                channel,
                pb2_grpc.DRAPluginStub(channel),
                self.registrations,
            )
            self._lock.notify_all()

    def _validate(self, info: Any) -> str:
        if info.type != "DRAPlugin":
            return f"unsupported plugin type {info.type!r}"
        if not info.supported_versions:
            return "empty list of supported gRPC services (aka supported versions)"
        if not any(s in self.services for s in info.supported_versions):
            return (
                f"none of services supported by the plugin ({list(info.supported_versions)}) "
                f"are supported by the kubelet ({list(self.services)})"
            )
        with self._lock:
            for plugin in self.plugins.values():
                if plugin.endpoint == info.endpoint and plugin.driver != info.name:
                    return f"endpoint {info.endpoint} already registered for {plugin.driver}"
        return ""

    def _deregister(self, socket: Path) -> None:
        with self._lock:
            for driver, plugin in list(self.plugins.items()):
                if plugin.socket == socket:
                    plugin.channel.close()
                    del self.plugins[driver]
            self._lock.notify_all()

    def wait_registered(
        self, driver: str, timeout_s: float = 10.0, after: int = 0
    ) -> RegisteredPlugin:
        """The driver's registration, once there is one newer than registration number
        ``after`` (pass :attr:`registrations` read before restarting a plugin)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while driver not in self.plugins or self.plugins[driver].serial <= after:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{driver} did not register; refusals: {self.refusals}")
                self._lock.wait(left)
            return self.plugins[driver]

    def wait_deregistered(self, driver: str, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while driver in self.plugins:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{driver} is still registered")
                self._lock.wait(left)

    # -- DRA calls -------------------------------------------------------------------------
    def _plugin(self, driver: str) -> RegisteredPlugin:
        with self._lock:
            plugin = self.plugins.get(driver)
        if plugin is None:
            raise LookupError(f"DRA driver {driver} is not registered")
        return plugin

    @staticmethod
    def _claims(pb2: Any, claims: Iterable[ClaimRef | tuple[str, str, str]]) -> list[Any]:
        out = []
        for claim in claims:
            ns, uid, name = (
                (claim.namespace, claim.uid, claim.name) if isinstance(claim, ClaimRef) else claim
            )
            out.append(pb2.Claim(namespace=ns, uid=uid, name=name))
        return out

    def prepare(
        self, driver: str, claims: Iterable[ClaimRef | tuple[str, str, str]]
    ) -> dict[str, dict[str, Any]]:
        """NodePrepareResources; per claim uid ``{"devices": [...], "error": str}``."""
        plugin = self._plugin(driver)
        pb2 = _API[plugin.service][0]
        response = plugin.stub.NodePrepareResources(
            pb2.NodePrepareResourcesRequest(claims=self._claims(pb2, claims)),
            timeout=self.call_timeout_s,
        )
        return {
            uid: {
                "error": entry.error,
                "devices": [
                    {
                        "requestNames": list(d.request_names),
                        "poolName": d.pool_name,
                        "deviceName": d.device_name,
                        "cdiDeviceIDs": list(d.cdi_device_ids),
                    }
                    for d in entry.devices
                ],
            }
            for uid, entry in response.claims.items()
        }

    def unprepare(
        self, driver: str, claims: Iterable[ClaimRef | tuple[str, str, str]]
    ) -> dict[str, str]:
        """NodeUnprepareResources; per claim uid its error ("" when done)."""
        plugin = self._plugin(driver)
        pb2 = _API[plugin.service][0]
        response = plugin.stub.NodeUnprepareResources(
            pb2.NodeUnprepareResourcesRequest(claims=self._claims(pb2, claims)),
            timeout=self.call_timeout_s,
        )
        return {uid: entry.error for uid, entry in response.claims.items()}

    def prepare_until_done(
        self,
        driver: str,
        claims: Sequence[ClaimRef | tuple[str, str, str]],
        timeout_s: float = 20.0,
    ) -> dict[str, dict[str, Any]]:
        """Retry like the pod sync loop: gRPC failures and missing or failed claims are
        retried until every claim succeeded or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            try:
                out = self.prepare(driver, claims)
                if len(out) == len(claims) and not any(v["error"] for v in out.values()):
                    return out
                last = out
            except (grpc.RpcError, LookupError) as exc:
                last = exc
            time.sleep(self.poll_s)
        raise TimeoutError(f"NodePrepareResources did not succeed: {last}")

    def unprepare_until_done(
        self,
        driver: str,
        claims: Sequence[ClaimRef | tuple[str, str, str]],
        timeout_s: float = 20.0,
    ) -> None:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            try:
                out = self.unprepare(driver, claims)
                if len(out) == len(claims) and not any(out.values()):
                    return
                last = out
            except (grpc.RpcError, LookupError) as exc:
                last = exc
            time.sleep(self.poll_s)
        raise TimeoutError(f"NodeUnprepareResources did not succeed: {last}")


def socket_inode(path: Path) -> int:
    """The inode of a socket file (tests use it to see that a restart made a new one)."""
    return os.stat(path).st_ino
