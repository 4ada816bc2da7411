"""Multi-host: 2 processes x 2 CPU devices on localhost (jax.distributed, gloo collectives).

Each process runs tests/_multihost_worker.py: the Wan pipeline on a (data 1, tensor 2,
sequence 2) mesh spanning both processes, resident and with offloading. Checked here:

- both processes' frames equal the single-process, single-device frames;
- each process read from the transformer checkpoint exactly its share: half of every tensor the
  ``tensor`` axis splits (the other process holds the other half) plus every replicated tensor,
  counted by the pipeline's counting reader (bytes requested from the memory map);
- only process 0 wrote the video and the metrics.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from vidax.core.params import flatten
from vidax.core.sharding import TENSOR
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.sharding import WAN_RULES
from vidax.models.wan.transformer import transformer_specs

WORKER = Path(__file__).with_name("_multihost_worker.py")
TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def demo_ckpt(tmp_path_factory):
    from vidax.models.wan.demo import write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("wan") / "demo", seed=3,
                                 transformer_overrides={"num_attention_heads": 4})


@pytest.fixture(scope="module")
def two_processes(demo_ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("multihost")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    logs = [out / f"log{i}.txt" for i in range(2)]
    procs = []
    try:
        for i in range(2):
            with open(logs[i], "w") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, str(WORKER), str(demo_ckpt), str(out), str(port), str(i), "2"],
                    env=env, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + TIMEOUT_S
        # A failed process leaves its peer waiting in a collective: stop at the first failure.
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.2)
    finally:
        for p in procs:  # never leave a worker behind
            if p.poll() is None:
                p.kill()
                p.wait()
    for i, p in enumerate(procs):
        assert p.returncode == 0, f"process {i} exited with {p.returncode}:\n{logs[i].read_text()[-4000:]}"
    return out


def _single_process_frames(ckpt):
    from vidax.models.wan.pipeline import WanPipeline

    kw = dict(height=32, width=32, num_frames=1, num_inference_steps=2, output_type="float", progress=False)
    return WanPipeline.from_pretrained(ckpt, dtype="float32")("a red panda", "blurry", **kw).frames


def test_two_processes_produce_the_single_process_frames(two_processes, demo_ckpt):
    single = _single_process_frames(demo_ckpt)
    for pid in range(2):
        result = json.loads((two_processes / f"result{pid}.json").read_text())
        assert (result["process_index"], result["process_count"]) == (pid, 2)
        assert (result["local_devices"], result["global_devices"]) == (2, 4)
        # The tensor axis spans the processes, the sequence axis stays within each.
        assert result["resident"]["mesh_processes"] == [[0, 0], [1, 1]]
        for name in ("resident", "offload"):
            frames = np.load(two_processes / f"frames{pid}_{name}.npy")
            assert frames.shape == single.shape
            assert np.abs(frames - single).max() < 1e-4, (pid, name)


def test_each_process_reads_its_share_of_the_checkpoint(two_processes, demo_ckpt):
    cfg = WanTransformerConfig.from_dict(json.loads((demo_ckpt / "transformer" / "config.json").read_text()))
    split = replicated = 0
    for path, spec in flatten(transformer_specs(cfg)):
        nbytes = int(np.prod(spec.shape)) * 4  # the demo checkpoint is float32
        pspec = WAN_RULES.param_spec(path, spec)
        if any(entry == TENSOR for entry in pspec):
            split += nbytes
        else:
            replicated += nbytes
    assert split > replicated  # the test means something: most bytes are split
    expected = split // 2 + replicated
    for pid in range(2):
        result = json.loads((two_processes / f"result{pid}.json").read_text())
        for name in ("resident", "offload"):
            assert result[name]["bytes_read"] == expected, (pid, name, result[name]["bytes_read"], expected)


def test_only_process_zero_writes_outputs(two_processes):
    results = [json.loads((two_processes / f"result{pid}.json").read_text()) for pid in range(2)]
    assert [r["wrote_video"] for r in results] == [True, False]
    assert (two_processes / "video0.mp4").is_file() and (two_processes / "metrics0.json").is_file()
    assert not (two_processes / "video1.mp4").exists() and not (two_processes / "metrics1.json").exists()
