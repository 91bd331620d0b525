"""``--config DIR``: a ConfigMap mounted by the kubelet, one config per key, reloaded on the
kubelet's atomic ``..data`` swap; a bad key keeps the last good view serving and is reported.

The volume is laid out the way the kubelet's atomic writer lays it out (``pkg/volume/util/
atomic_writer.go``): a timestamped directory with the files, ``..data`` linking to it, and one
link per key through ``..data``. An update writes a new timestamped directory, points a
temporary link at it and renames that link over ``..data`` (one ``rename``), then removes the
old directory."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import pytest

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.config.loader import configmap_volume_files, load_config_files
from kgpu.errors import FieldError
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.views import make_machine

_stamps = itertools.count()


def shared(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )


class ConfigMapVolume:
    """A directory the way the kubelet keeps a mounted ConfigMap."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def write(self, files: dict[str, str]) -> None:
        stamp = self.root / f"..2025_01_01_00_00_{next(_stamps):02d}.000000000"
        stamp.mkdir()
        for key, text in files.items():
            (stamp / key).write_text(text)
        data = self.root / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(stamp.name)
        os.rename(tmp, data)  # the atomic swap
        for key in files:
            if not (self.root / key).is_symlink():
                (self.root / key).symlink_to(Path("..data") / key)
        for link in self.root.iterdir():  # keys the new version no longer has
            if not link.name.startswith(".") and link.name not in files:
                link.unlink()
        if old is not None:
            shutil.rmtree(self.root / old)


def test_each_key_is_one_config_and_a_load_reads_one_version(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "cm")
    volume.write({"a100": shared(2), "t4": shared(4), "mig.yaml": "version: v1\nmig-configs:\n"
                  "  tiny:\n    - devices: all\n      mig-enabled: false\n"})  # fmt: skip
    configs = load_config_files([volume.root])
    assert set(configs.plugin_configs) == {"a100", "t4"}
    assert "tiny" in configs.mig_configs
    assert configs.plugin_configs["a100"].source == str(volume.root / "a100")
    first = configmap_volume_files(volume.root)
    assert all(p.parent.name.startswith("..2025") for p in first)  # through ..data, resolved
    volume.write({"a100": shared(3)})
    assert [p.name for p in configmap_volume_files(volume.root)] == ["a100"]
    assert not first[0].exists()  # the old version is gone: nothing reads a mix of the two


def test_every_bad_key_is_reported_with_its_path(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "cm")
    volume.write({"good": shared(2), "bad": shared(1), "worse": "version: v9\n"})
    with pytest.raises(FieldError) as err:
        load_config_files([volume.root])
    files = sorted(p.file for p in err.value.problems)
    assert files == [str(volume.root / "bad"), str(volume.root / "worse")]


def test_an_empty_directory_is_not_taken_for_a_configmap(tmp_path: Path) -> None:
    with pytest.raises(FieldError, match="is a directory; pass the files in it"):
        load_config_files([tmp_path])
    volume = ConfigMapVolume(tmp_path / "cm")
    volume.write({})
    assert load_config_files([volume.root]).plugin_configs == {}  # mounted, no keys yet


def test_the_kubelets_swap_reloads_and_a_bad_key_keeps_the_last_good_view(root: Path) -> None:
    volume = ConfigMapVolume(root / "device-plugin-config")
    volume.write({"shared": shared(2), "whole": "version: v1\n"})
    opts = AgentOptions(
        machine="test",
        config_files=(volume.root,),
        labels={"nvidia.com/device-plugin.config": "shared"},
        kubelet_root=root,
        node_name="n",
        dra=False,
        status_file=root / "status.json",
    )
    agent = Agent(opts, backend=SimulatedBackend(make_machine(2)))
    with FakeKubelet(root) as kubelet:
        agent.start()
        try:
            assert kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 4)
            volume.write({"shared": shared(3), "whole": "version: v1\n"})
            assert kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 6)
            volume.write({"shared": shared(1), "whole": "version: v1\n"})  # replicas must be >= 2
            assert kubelet.wait_for(lambda: bool(agent.last_error))
            assert str(volume.root / "shared") in agent.last_error
            assert len(kubelet.devices("nvidia.com/gpu")) == 6  # the last good view serves
            assert agent.view().config_name == "shared"
            volume.write({"shared": shared(2)})
            assert kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 4)
            assert agent.last_error == ""
        finally:
            agent.stop()
