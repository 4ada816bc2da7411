import os

# Simulated devices for mesh tests; must be set before JAX initialises its backend.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# The CLI's persistent compilation cache stays off in tests (they run `vidax generate` in this process,
# and would otherwise write to ~/.cache/vidax); tests/test_cli.py turns it on where it is the subject.
os.environ["VIDAX_COMPILE_CACHE"] = "off"

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
