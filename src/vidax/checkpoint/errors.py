"""Errors raised while reading and translating checkpoints."""


class CheckpointError(ValueError):
    """A checkpoint file or folder is missing, corrupt, or does not match the model.

    The message always names the file (or key) and how to fix it.
    """
