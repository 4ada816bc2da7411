"""Cosmos3Pipeline on a (data, tensor, sequence) mesh of 8 simulated devices gives the single device's frames (the
transformer's weights sharded by COSMOS3_RULES, the step's inputs replicated)."""

import jax
import numpy as np
import pytest

from vidax.models.cosmos3.demo import write_demo_checkpoint
from vidax.models.cosmos3.pipeline import Cosmos3Pipeline


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("c3mesh") / "edge", edge=True)


def test_mesh_matches_one_device(folder):
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    kw = dict(height=32, width=48, num_frames=9, num_inference_steps=3, seed=3, progress=False, output_type="float")
    one = Cosmos3Pipeline.from_pretrained(folder, dtype="float32", progress=False, compile_cache=False)("a cat", **kw)
    mesh = Cosmos3Pipeline.from_pretrained(folder, dtype="float32", progress=False, compile_cache=False, dp=2, tp=2,
                                           sp=2)("a cat", **kw)
    assert np.abs(mesh.latents - one.latents).max() < 1e-4
    assert np.abs(mesh.frames - one.frames).max() < 1e-5
