"""The kgpu image, built and run as the chart runs it.

deploy/container/build.sh builds the linux/amd64 image with buildah from the Dockerfile (on its
cached debootstrap base) and writes the OCI archive (kept while the files the image is made of
do not change: a rerun then takes seconds); this test takes the image back from that
archive and runs its processes in its root file system (a private mount namespace and
``chroot``: no container runtime is needed) with what ``helm template`` renders for the agent
DaemonSet and the controller Deployment: the command or the image's entrypoint with the
rendered args, the image's environment plus the rendered one, the rendered user (else the
image's), and every rendered volume mount, backed by a directory standing in for the node
(hostPath), an empty one (emptyDir) or the rendered ConfigMap's or Secret's data. The
controller's root file system is read-only, as its securityContext asks.

Two rendered arguments are pointed at the test's stand-ins, and nothing else is changed:
``--machine=nvml`` becomes a simulated DGX H100 (no GPU here) and ``--in-cluster`` becomes
``--kubeconfig`` for the API-server stand-in (which speaks plain HTTP on loopback).

What a user would notice: the init step ``kgpu-link-driver`` links a driver laid out as a real
install; the agent registers ``nvidia.com/gpu`` with the kubelet stand-in and answers Allocate;
``/healthz`` answers; the controller takes its Lease; both exit 0 on SIGTERM.

Needs root, buildah and debootstrap (scripts/test.sh installs them on Debian) and PyPI for the
wheels; skips saying why without them, fails under CI=true.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.testing.apiserver import TOKEN, FakeApiServer, write_kubeconfig
from kgpu.testing.fake_kubelet import FakeKubelet

from .conftest import NAMESPACE, REPO, Obj, _missing, helm_template

#: a cold build (debootstrap, every wheel downloaded) on 2 busy cores; a cached one is ~1-2 min
BUILD_TIMEOUT_S = 1200
pytestmark = [pytest.mark.slow, pytest.mark.timeout(BUILD_TIMEOUT_S + 300)]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
STORE = [
    "--root",
    os.environ.get("KGPU_BUILDAH_ROOT", "/var/tmp/kgpu-buildah/storage"),
    "--runroot",
    os.environ.get("KGPU_BUILDAH_RUNROOT", "/var/tmp/kgpu-buildah/run"),
    "--storage-driver",
    "vfs",
]
CACHE = Path(os.environ.get("KGPU_IMAGE_CACHE", Path.home() / ".cache" / "kgpu-image"))
KUBECONFIG_IN_IMAGE = "/var/run/kgpu-test/kubeconfig"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
NODE = "gpu-node-1"
#: a driver install as the NVIDIA .run installer and the distribution packages lay it out
DRIVER_FILES = (
    "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.195.03",
    "usr/lib/x86_64-linux-gnu/libcuda.so.570.195.03",
    "usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.570.195.03",
    "usr/bin/nvidia-smi",
    "usr/bin/nvidia-cuda-mps-control",
    "usr/bin/nvidia-cuda-mps-server",
)
DRIVER_LINKS = {
    "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": "libnvidia-ml.so.570.195.03",
    "usr/lib/x86_64-linux-gnu/libcuda.so.1": "libcuda.so.570.195.03",
    "usr/lib/x86_64-linux-gnu/libcuda.so": "libcuda.so.1",
}


def _buildah(*args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        ["buildah", *STORE, *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"buildah {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


@dataclass
class Image:
    root: Path
    env: list[str]
    user: str
    entrypoint: list[str]
    build_s: float


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    """The amd64 image built by build.sh, taken back from its OCI archive and mounted."""
    why = []
    if os.geteuid() != 0:
        why.append("not root")
    why += [f"no {t}" for t in ("buildah", "debootstrap") if shutil.which(t) is None]
    if why:
        _missing(
            f"cannot build the image ({', '.join(why)}; Debian: apt-get install buildah "
            "debootstrap, as scripts/test.sh does)"
        )
    out = CACHE / "dist"
    started = time.monotonic()
    build = subprocess.Popen(
        [
            "bash",
            str(REPO / "deploy" / "container" / "build.sh"),
            "--arch",
            "amd64",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # so a timeout stops buildah too, not only the script
    )
    try:
        stdout, stderr = build.communicate(timeout=BUILD_TIMEOUT_S)
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
            build.wait()
    build_s = time.monotonic() - started
    assert build.returncode == 0, stderr[-5000:]
    archive = out / f"kgpu-{VERSION}-linux-amd64.oci.tar"
    assert f"{archive} sha256:" in stdout
    ctr = _buildah("from", "--quiet", f"oci-archive:{archive}")
    try:
        root = Path(_buildah("mount", ctr))
        config = json.loads(_buildah("inspect", "--type", "container", ctr))["OCIv1"]["config"]
        yield Image(root, config["Env"], config["User"], config["Entrypoint"], build_s)
    finally:
        subprocess.run(["buildah", *STORE, "rm", ctr], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def rendered(helm: str) -> Callable[..., list[Obj]]:
    def render(*sets: str) -> list[Obj]:
        args = [a for s in sets for a in ("--set", s)]
        done = helm_template(helm, "1.34", *args)
        assert done.returncode == 0, done.stderr
        return [o for o in yaml.safe_load_all(done.stdout) if o]

    return render


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


def _wait(
    check: Callable[[], bool], seconds: float, proc: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert proc.poll() is None, f"exited {proc.returncode}:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"timed out:\n{log.read_text()[-4000:]}"
        time.sleep(0.2)


class Pod:
    """The volumes of one rendered pod, backed by directories under ``tmp``: ``host/`` stands
    in for the node's file system."""

    def __init__(self, spec: Obj, objects: list[Obj], tmp: Path) -> None:
        self.tmp = tmp
        self.host = tmp / "host"
        self.sources: dict[str, Path] = {}
        for volume in spec.get("volumes", []):
            name = volume["name"]
            if "hostPath" in volume:
                path = self.host / volume["hostPath"]["path"].lstrip("/")
                path.mkdir(parents=True, exist_ok=True)
            elif "emptyDir" in volume:
                path = tmp / "empty" / name
                path.mkdir(parents=True)
            elif "configMap" in volume or "secret" in volume:
                kind = "ConfigMap" if "configMap" in volume else "Secret"
                ref = (
                    volume["configMap"]["name"]
                    if kind == "ConfigMap"
                    else volume["secret"]["secretName"]
                )
                (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == ref]
                path = tmp / kind.lower() / name
                path.mkdir(parents=True)
                for key, value in obj.get("data", {}).items():
                    data = base64.b64decode(value) if kind == "Secret" else value.encode()
                    (path / key).write_bytes(data)
                    (path / key).chmod(0o644)
            else:
                raise AssertionError(f"volume kind of {volume} not handled")
            path.chmod(0o755)
            self.sources[name] = path

    def start(
        self,
        image: Image,
        container: Obj,
        *,
        replace: dict[str, str],
        fields: dict[str, str],
        extra_mounts: dict[str, Path],
        read_only_root: bool = False,
    ) -> tuple[subprocess.Popen[bytes], Path]:
        """Run one rendered container in the image's root, the way a runtime would."""
        argv = list(container.get("command") or image.entrypoint) + list(container.get("args", []))
        argv = [replace.get(a, a) for a in argv]
        env = dict(e.partition("=")[::2] for e in image.env)
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = str(e["value"])
            else:
                env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        security = container.get("securityContext", {})
        user = str(security.get("runAsUser", image.user.split(":")[0]))
        group = str(security.get("runAsGroup", [*image.user.split(":"), user][1]))
        mounts = [
            (self.sources[m["name"]], m["mountPath"], bool(m.get("readOnly")))
            for m in container.get("volumeMounts", [])
        ] + [(src, dst, True) for dst, src in extra_mounts.items()]
        root = image.root
        targets = {target: _inside(root, target) for _, target, _ in mounts}
        for source, target, _ in mounts:
            if source.is_dir():
                targets[target].mkdir(parents=True, exist_ok=True)
            else:
                targets[target].parent.mkdir(parents=True, exist_ok=True)
                targets[target].touch()
        steps = ["set -e"]
        if read_only_root:
            steps += [f"mount --bind {root} {root}", f"mount -o remount,bind,ro {root}"]
        steps += [f"mount -t proc proc {root}/proc", f"mount --rbind /dev {root}/dev"]
        for source, target, ro in mounts:
            where = shlex.quote(str(targets[target]))
            steps.append(f"mount --bind {shlex.quote(str(source))} {where}")
            if ro:
                steps.append(f"mount -o remount,bind,ro {where}")
        run = [
            "chroot",
            f"--userspec={user}:{group}",
            str(root),
            "/usr/bin/env",
            "-i",
            *(f"{k}={v}" for k, v in env.items()),
            *argv,
        ]
        steps.append("exec " + shlex.join(run))
        log = self.tmp / f"{container['name']}.log"
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(steps)],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        return proc, log


def _inside(root: Path, path: str) -> Path:
    """``path`` as seen inside ``root``: symlinks (Debian's ``/var/run -> /run``) resolved
    against the root, never the host's file system."""
    here = root
    hops = 0
    parts = list(Path(path).parts[1:])
    while parts:
        part = parts.pop(0)
        step = here / part
        if step.is_symlink():
            hops += 1
            assert hops < 40, f"symlink loop at {step}"
            target = Path(os.readlink(step))
            parts = list(target.parts[1:] if target.is_absolute() else target.parts) + parts
            here = root if target.is_absolute() else here
            continue
        here = here.parent if part == ".." and here != root else step
    assert here.is_relative_to(root), here
    return here


def _service_account(tmp: Path) -> Path:
    """What the kubelet mounts into every pod of the release's namespace at
    :data:`SERVICE_ACCOUNT` (the processes read their namespace from it)."""
    path = tmp / "serviceaccount"
    path.mkdir()
    path.chmod(0o755)
    for name, text in (("namespace", NAMESPACE), ("token", TOKEN), ("ca.crt", "")):
        (path / name).write_text(text)
        (path / name).chmod(0o644)
    return path


def _stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"no exit 30 s after SIGTERM:\n{log.read_text()[-4000:]}") from None
    assert code == 0, f"exit {code} after SIGTERM:\n{log.read_text()[-4000:]}"


def _pod_spec(objects: list[Obj], kind: str) -> Obj:
    (obj,) = [o for o in objects if o["kind"] == kind]
    spec: Obj = obj["spec"]["template"]["spec"]
    return spec


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory for the node's stand-in: the kubelet's unix sockets live under it, and
    a socket path may not exceed 107 bytes (pytest's tmp_path can)."""
    path = Path(tempfile.mkdtemp(prefix="kgpu-image-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Path]]:
    server = FakeApiServer(release="1.34").start()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    kubeconfig.chmod(0o644)
    try:
        yield server, kubeconfig
    finally:
        server.stop()


def _admin_create(server: FakeApiServer, obj: Obj) -> None:
    request = urllib.request.Request(
        f"{server.url}/api/v1/nodes",
        data=json.dumps(obj).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 201


def test_the_agent_runs_in_the_image_as_the_daemonset_renders_it(
    image: Image,
    rendered: Callable[..., list[Obj]],
    api: tuple[FakeApiServer, Path],
    short_tmp: Path,
) -> None:
    server, kubeconfig = api
    health, metrics = _free_port(), _free_port()
    objects = rendered(f"agent.healthPort={health}", f"dcgmExporter.service.port={metrics}")
    spec = _pod_spec(objects, "DaemonSet")
    pod = Pod(spec, objects, short_tmp)
    # the node: a driver installed under the driver root (the chart's default, the host's /)
    for rel in DRIVER_FILES:
        (pod.host / rel).parent.mkdir(parents=True, exist_ok=True)
        (pod.host / rel).write_bytes(b"\x7fELF fake driver file")
    for rel, target in DRIVER_LINKS.items():
        (pod.host / rel).symlink_to(target)
    _admin_create(server, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    fields = {"spec.nodeName": NODE, "metadata.name": "kgpu-agent-x7k2p"}
    mounts = {KUBECONFIG_IN_IMAGE: kubeconfig, SERVICE_ACCOUNT: _service_account(short_tmp)}
    replace = {
        "--machine=nvml": "--machine=dgx-h100",
        "--in-cluster": f"--kubeconfig={KUBECONFIG_IN_IMAGE}",
    }

    (init,) = spec["initContainers"]
    proc, log = pod.start(image, init, replace=replace, fields=fields, extra_mounts=mounts)
    assert proc.wait(60) == 0, log.read_text()
    links = pod.sources["driver-links"]
    assert os.readlink(links / "lib" / "libnvidia-ml.so.1") == (
        "/driver-root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.195.03"
    )
    assert os.readlink(links / "bin" / "nvidia-cuda-mps-control") == (
        "/driver-root/usr/bin/nvidia-cuda-mps-control"
    )

    (container,) = spec["containers"]
    kubelet = FakeKubelet(pod.host / "var" / "lib" / "kubelet").start()
    proc, log = pod.start(image, container, replace=replace, fields=fields, extra_mounts=mounts)
    try:
        _wait(lambda: len(kubelet.devices("nvidia.com/gpu")) == 8, 120, proc, log)
        gpu = sorted(kubelet.devices("nvidia.com/gpu"))[0]
        answer = kubelet.allocate("nvidia.com/gpu", [gpu])
        assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == gpu
        _wait(lambda: _get(f"http://127.0.0.1:{health}/healthz")[0] == 200, 60, proc, log)
        _stop(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kubelet.stop()
    print(f"image build (build.sh, cached base): {image.build_s:.1f} s")


def test_the_controller_runs_in_the_image_as_the_deployment_renders_it(
    image: Image,
    rendered: Callable[..., list[Obj]],
    api: tuple[FakeApiServer, Path],
    tmp_path: Path,
) -> None:
    server, kubeconfig = api
    health, webhook = _free_port(), _free_port()
    objects = rendered(f"controller.healthPort={health}", f"controller.webhook.port={webhook}")
    spec = _pod_spec(objects, "Deployment")
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert "runAsUser" not in container.get("securityContext", {})
    assert image.user.split(":")[0] != "0"
    pod = Pod(spec, objects, tmp_path)
    proc, log = pod.start(
        image,
        container,
        replace={"--in-cluster": f"--kubeconfig={KUBECONFIG_IN_IMAGE}"},
        fields={"metadata.name": "kgpu-controller-5d9c7-abcde"},
        extra_mounts={
            KUBECONFIG_IN_IMAGE: kubeconfig,
            SERVICE_ACCOUNT: _service_account(tmp_path),
        },
        read_only_root=container["securityContext"].get("readOnlyRootFilesystem", False),
    )
    base = f"http://127.0.0.1:{health}"
    try:
        _wait(lambda: _get(f"{base}/healthz")[1].startswith("leader"), 120, proc, log)
        lease = _lease(server)
        assert lease["spec"]["holderIdentity"] == "kgpu-controller-5d9c7-abcde"
        _stop(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _lease(server)["spec"]["holderIdentity"] == ""  # released on SIGTERM


def _lease(server: FakeApiServer) -> Any:
    status, body = _get(
        f"{server.url}/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/kgpu-controller"
    )
    assert status == 200, body
    return json.loads(body)
