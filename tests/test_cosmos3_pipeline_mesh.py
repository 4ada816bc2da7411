"""Cosmos3Pipeline on a (data, tensor, sequence) mesh of 8 simulated devices, and with its layers offloaded or run by
the host block loop, gives the single resident device's frames."""

import jax
import numpy as np
import pytest

from vidax.models.cosmos3.demo import write_demo_checkpoint
from vidax.models.cosmos3.pipeline import Cosmos3Pipeline


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("c3mesh") / "edge", edge=True)


KW = dict(height=32, width=48, num_frames=9, num_inference_steps=3, seed=3, progress=False, output_type="float")


@pytest.fixture(scope="module")
def one(folder):
    """The reference run: resident, one device (the host block loop, "auto" on the CPU backend)."""
    return Cosmos3Pipeline.from_pretrained(folder, dtype="float32", progress=False, compile_cache=False,
                                           block_loop="host")("a cat", **KW)


@pytest.mark.parametrize("load", [dict(dp=2, tp=2, sp=2), dict(offload_chunk=1), dict(block_loop="scan")],
                         ids=["dp2-tp2-sp2", "offload-1", "scan"])
def test_placements_match_one_device(folder, one, load):
    if "dp" in load and len(jax.devices()) < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    pipe = Cosmos3Pipeline.from_pretrained(folder, dtype="float32", progress=False, compile_cache=False, **load)
    out = pipe("a cat", **KW)
    if "offload_chunk" in load:
        assert out.metrics["block_loop"] == "offload"
    assert np.abs(out.latents - one.latents).max() < 1e-4
    assert np.abs(out.frames - one.frames).max() < 1e-5
