"""One process of the 2-process test in tests/test_multihost.py (not collected by pytest).

Usage: python tests/_multihost_worker.py CKPT OUT_DIR PORT PROCESS_ID NUM_PROCESSES

Two simulated CPU devices per process, gloo collectives, ``jax.distributed.initialize`` on
localhost; a (data 1, tensor 2, sequence 2) mesh over the 4 global devices (tensor across the
processes, sequence within each), resident and offloaded (chunks of 1 block). Writes per process
``result{pid}.json`` (bytes of the transformer checkpoint read, mesh layout) and the float frames
``frames{pid}_{resident,offload}.npy``; the video goes through ``vidax.cli.write_outputs``, which
writes only on process 0.
"""

import json
import os
import sys
from pathlib import Path


def main() -> int:
    ckpt, out, port, pid, nproc = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_default_matmul_precision", "highest")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=nproc, process_id=pid,
                               initialization_timeout=120)
    import numpy as np

    from vidax.cli import write_outputs
    from vidax.models.wan.pipeline import WanPipeline

    kw = dict(height=32, width=32, num_frames=1, num_inference_steps=2, output_type="float", progress=False)
    result = {"process_index": jax.process_index(), "process_count": jax.process_count(),
              "local_devices": len(jax.local_devices()), "global_devices": len(jax.devices())}
    for name, extra in (("resident", {}), ("offload", {"offload_chunk": 1})):
        pipe = WanPipeline.from_pretrained(ckpt, dtype="float32", dp=1, tp=2, sp=2, **extra)
        run = pipe("a red panda", "blurry", **kw)
        np.save(out / f"frames{pid}_{name}.npy", run.frames)
        result[name] = {"bytes_read": pipe.load_stats["transformer_bytes_read"], "mesh_processes": [
            [d.process_index for d in row] for row in pipe.mesh.devices[0]]}
        if name == "resident":
            uint8 = np.round(run.frames * 255).astype(np.uint8)
            result["wrote_video"] = write_outputs(uint8[0], {"process": pid}, out / f"video{pid}.mp4",
                                                  str(out / f"metrics{pid}.json"), 16)
    (out / f"result{pid}.json").write_text(json.dumps(result))
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
