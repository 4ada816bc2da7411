import os

# Simulated devices for mesh tests; must be set before JAX initialises its backend.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# The suite compiles hundreds of small programs and runs each for milliseconds: most of its time was XLA's
# backend optimisation. JAX's own switch for this (the one its test suite uses: LLVM optimisation level 0, no
# expensive LLVM passes; the HLO passes, fusion and buffer assignment are unchanged) cuts the compile-bound test
# files by about a third. Results move by float rounding only (fp32 frames by ~1e-6), far inside every parity
# tolerance. Set before jax is imported, and inherited by the `vidax` subprocesses tests start;
# JAX_DISABLE_MOST_OPTIMIZATIONS=0 in the environment restores full optimisation.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# The CLI's persistent compilation cache stays off in tests (they run `vidax generate` in this process,
# and would otherwise write to ~/.cache/vidax); tests/test_cli.py turns it on where it is the subject.
os.environ["VIDAX_COMPILE_CACHE"] = "off"

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
