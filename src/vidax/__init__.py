"""vidax: a JAX inference engine for open video generation models.

The package never imports PyTorch. See README.md and docs/design.md.

    import vidax
    pipe = vidax.load_pipeline("Wan2.1-T2V-1.3B-Diffusers", dtype="bfloat16")
    out = pipe("a red panda in the snow", num_frames=81)   # vidax.video.VideoOutput(frames, fps, metrics)
"""

__version__ = "0.1.0"


def load_pipeline(folder, task=None, **runtime):
    """The pipeline of any checkpoint folder, its family and task found from the folder
    (:func:`vidax.models.registry.load_pipeline`)."""
    from vidax.models.registry import load_pipeline as load

    return load(folder, task, **runtime)
