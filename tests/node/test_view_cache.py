"""The node-view cache across config reloads: an agent loads a new ConfigSet on every config
change and runs for months, so a superseded set and the views built under it must go away with
it (before, a ``functools.lru_cache`` keyed by the set kept up to 8,192 of them alive: about
20 KiB of RSS per reload on a 4-GPU node, the growth of a long chaos run, BENCHMARKS.md)."""

from __future__ import annotations

import gc
import weakref

import pytest

from kgpu.config import load_config_strings
from kgpu.errors import FieldError
from kgpu.hardware.profiles import load_machine
from kgpu.node.model import NodeView
from kgpu.node.view import build_node_view
from kgpu.testing.split_node import MACHINE, NODE, split_config


def _live_views() -> int:
    return sum(isinstance(o, NodeView) for o in gc.get_objects())


def test_reloaded_configs_do_not_keep_old_sets_or_views_alive() -> None:
    machine = load_machine(MACHINE, hostname=NODE)
    gc.collect()
    views_before = _live_views()
    dropped: list[weakref.ref[object]] = []
    for reload in range(50):  # the chaos run's config swap, 50 times
        configs = load_config_strings({"split.yaml": split_config(2 + reload % 2)})
        view = build_node_view(machine, configs, {})
        assert [len(r.devices) for r in view.resources] == [2, 2 * (2 + reload % 2), 4, 4]
        assert build_node_view(machine, configs, {}).resources == view.resources  # cached
        dropped.append(weakref.ref(configs))
        del configs, view
    gc.collect()
    assert [ref() for ref in dropped[:-1]] == [None] * 49
    assert _live_views() - views_before <= 2  # the last set's view (and its labelled copy)


MPS_MIXED = """\
version: v1
flags:
  migStrategy: mixed
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""


def test_a_refused_config_still_fails_every_time() -> None:
    bad = load_config_strings({"mps.yaml": MPS_MIXED})
    machine = load_machine(MACHINE, hostname=NODE)
    for _ in range(2):  # the second answer comes from the set's cache
        with pytest.raises(FieldError, match=r"mps\.yaml: flags\.migStrategy: MPS sharing"):
            build_node_view(machine, bad, {})
