"""Video files: frames in (and optionally an audio track), H.264 (+ AAC) mp4 out, through PyAV; and back, for checks.

Outputs are written to a temporary file beside the target and renamed into
place only when complete, so an interrupted or failed run never leaves a
half-written video at the requested path.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from vidax.core.files import staged
from vidax.core.inputs import check_finite_video


def write_video(frames: np.ndarray, path: str | os.PathLike, fps: float = 16, crf: int = 18,
                audio: np.ndarray | None = None, sample_rate: int | None = None) -> Path:
    """Write ``frames`` as an H.264 (yuv420p) mp4, with an AAC audio track if ``audio`` is given, published
    atomically (:class:`vidax.core.files.staged`).

    Args:
      frames: uint8 ``(T, H, W, 3)`` RGB; ``H`` and ``W`` even (yuv420p).
      path: target file; its folder is created if needed.
      fps: frames per second (16 for Wan2.1).
      crf: x264 constant rate factor (lower is better quality; 18 is visually lossless).
      audio: float ``(channels, samples)`` waveform in [-1, 1] (clipped), 1 or 2 channels (LTX-2: stereo), or None.
      sample_rate: the waveform's rate in Hz (LTX-2.5: 48000); required with ``audio``.

    Returns:
      The written path.

    Raises:
      ValueError: frames of the wrong shape or dtype, no frames, odd height/width, or an fps that is not a
        positive finite number; audio of the wrong shape, non-finite, or at a rate AAC does not take; all before
        any file is created.
    """
    check_frames(frames, fps)
    if audio is not None or sample_rate is not None:
        audio = check_audio(audio, sample_rate)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged(path) as (tmp,):
        encode_video(frames, tmp, fps, crf, audio=audio, sample_rate=sample_rate)
    return path


#: Channel layouts of the audio track by channel count.
AUDIO_LAYOUTS = {1: "mono", 2: "stereo"}
#: The longest audio track written (samples per channel): an hour at 96 kHz.
MAX_AUDIO_SAMPLES = 3600 * 96000


def check_audio(audio: np.ndarray | None, sample_rate: int | None) -> np.ndarray:
    """The waveform as float32 ``(channels, samples)`` in [-1, 1], checked for an AAC track.

    Raises:
      ValueError: a missing waveform or rate, not ``(1 or 2, samples >= 1)``, too long, non-finite values, or a rate
        the AAC encoder does not take (the message lists those).
    """
    if audio is None or sample_rate is None:
        raise ValueError("an audio track needs both the waveform and its sample_rate")
    rates = av.codec.Codec("aac", "w").audio_rates or ()
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, numbers.Integral) or (
            rates and sample_rate not in rates):
        raise ValueError(f"sample_rate={sample_rate!r}: the AAC encoder takes {sorted(rates)} Hz")
    audio = np.asarray(audio)
    if audio.ndim != 2 or audio.shape[0] not in AUDIO_LAYOUTS or not 1 <= audio.shape[1] <= MAX_AUDIO_SAMPLES:
        raise ValueError(f"audio must be (channels, samples) with 1 or 2 channels and 1 to {MAX_AUDIO_SAMPLES} "
                         f"samples, got {audio.shape}")
    if not np.issubdtype(audio.dtype, np.floating):
        raise ValueError(f"audio must be a float waveform in [-1, 1], got {audio.dtype}")
    audio = audio.astype(np.float32)
    if not np.isfinite(audio).all():
        raise ValueError("audio holds NaN or infinite samples")
    return np.clip(audio, -1.0, 1.0)


def check_frames(frames: np.ndarray, fps: float) -> None:
    """Raise ValueError unless ``frames`` (uint8 ``(T, H, W, 3)``, T >= 1, even H and W) and ``fps`` can be written."""
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8 (T, H, W, 3), got {frames.dtype} {frames.shape}")
    if frames.shape[0] == 0:
        raise ValueError("no frames to write: frames has shape (0, H, W, 3)")
    if isinstance(fps, bool) or not isinstance(fps, numbers.Real) or not math.isfinite(fps) or fps <= 0:
        raise ValueError(f"fps={fps!r} must be a positive number of frames per second (e.g. 16)")
    _, h, w, _ = frames.shape
    if h % 2 or w % 2:
        raise ValueError(f"H.264 yuv420p needs even height and width, got {h}x{w}")


def encode_video(frames: np.ndarray, path: str | os.PathLike, fps: float = 16, crf: int = 18,
                 audio: np.ndarray | None = None, sample_rate: int | None = None) -> None:
    """Encode ``frames`` (checked by :func:`check_frames`) as H.264, and ``audio`` (:func:`check_audio`) as AAC, into
    the file ``path`` directly (a temporary file of :class:`vidax.core.files.staged`; :func:`write_video` is the
    atomic writer)."""
    frames = np.asarray(frames)
    check_frames(frames, fps)
    if audio is not None or sample_rate is not None:
        audio = check_audio(audio, sample_rate)
    _, h, w, _ = frames.shape
    with av.open(str(path), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height = w, h
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": str(crf)}
        # Every stream is added before the first packet is muxed (the mp4 header is written then).
        sound = _audio_stream(container, audio.shape[0], sample_rate) if audio is not None else None
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
        if sound is not None:
            _encode_audio(container, sound, audio)


def _audio_stream(container, channels: int, sample_rate: int):
    stream = container.add_stream("aac", rate=sample_rate)
    stream.codec_context.layout = AUDIO_LAYOUTS[channels]
    stream.codec_context.format = "fltp"
    return stream


def _encode_audio(container, stream, audio: np.ndarray) -> None:
    """Mux ``audio`` (float32 ``(channels, samples)``) into the AAC ``stream``, in frames of the encoder's size."""
    layout, sample_rate = AUDIO_LAYOUTS[audio.shape[0]], stream.codec_context.sample_rate
    size = stream.codec_context.frame_size or 1024
    for start in range(0, audio.shape[1], size):
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(audio[:, start:start + size]), format="fltp",
                                           layout=layout)
        frame.sample_rate, frame.pts = sample_rate, start
        for packet in stream.encode(frame):
            container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)


def read_audio(path: str | os.PathLike) -> tuple[np.ndarray, int, float]:
    """Decode a file's first audio stream: float32 ``(channels, samples)``, its sample rate, and the stream's duration
    in seconds as the container states it (AAC decodes to whole frames of 1024 samples).

    Raises:
      ValueError: the file has no audio stream.
    """
    with av.open(str(path)) as container:
        if not container.streams.audio:
            raise ValueError(f"{path}: no audio stream")
        stream = container.streams.audio[0]
        chunks = [f.to_ndarray() for f in container.decode(stream)]
        rate, channels = stream.codec_context.sample_rate, stream.codec_context.channels
        duration = float(stream.duration * stream.time_base) if stream.duration else float("nan")
    samples = np.concatenate(chunks, axis=1) if chunks else np.zeros((channels, 0), np.float32)
    return samples.astype(np.float32), rate, duration


def read_video(path: str | os.PathLike) -> tuple[np.ndarray, float]:
    """Decode a video file back to uint8 ``(T, H, W, 3)`` RGB frames and its frame rate."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
        rate = float(stream.average_rate) if stream.average_rate else float("nan")
    return np.stack(frames), rate


def frames_from_video(video, output_type: str = "uint8") -> np.ndarray:
    """Decoded video in ``[-1, 1]`` to frames, as diffusers' ``VideoProcessor.postprocess_video``.

    Args:
      video: float ``(B, C, F, H, W)`` (a VAE decode), values nominally in ``[-1, 1]``.
      output_type: ``"uint8"`` (rounded to ``[0, 255]``) or ``"float"`` (``[0, 1]``).

    Returns:
      ``(B, F, H, W, C)`` uint8 or float32.

    Raises:
      ValueError: an unknown ``output_type``.
      FloatingPointError: NaN or infinite values (:func:`vidax.core.inputs.check_finite_video`).
    """
    if output_type not in ("uint8", "float"):
        raise ValueError(f"output_type must be 'uint8' or 'float', got {output_type!r}")
    video = np.asarray(video, np.float32)
    check_finite_video(video)
    frames = np.clip(video.transpose(0, 2, 3, 4, 1) * 0.5 + 0.5, 0.0, 1.0)
    return np.round(frames * 255.0).astype(np.uint8) if output_type == "uint8" else frames


def peak_memory_metrics() -> dict[str, int | None]:
    """Peak host resident memory of this process and of its first device (bytes; ``peak_device_bytes`` is None where
    the backend does not report it, e.g. the CPU)."""
    import resource

    import jax

    metrics = {"peak_host_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    stats = jax.local_devices()[0].memory_stats() or {}
    metrics["peak_device_bytes"] = int(stats["peak_bytes_in_use"]) if "peak_bytes_in_use" in stats else None
    return metrics


#: The metrics every pipeline reports, with the same meaning for every family (seconds, bytes, the attention
#: implementation that ran in the transformer step, and the sizes generated).
COMMON_METRICS = (
    "load_s", "text_encoder_s", "vae_encode_s", "compile_s", "step_s", "sampling_s", "vae_decode_s",
    "peak_host_rss_bytes", "peak_device_bytes", "attention", "height", "width", "num_frames", "num_inference_steps",
    "fps",
)


def finish_metrics(metrics: dict[str, Any], **values: Any) -> dict[str, Any]:
    """Complete a pipeline call's metrics with ``values`` and the peak memory, and check every common key is there.

    Stages a call did not run count 0 s (``vae_encode_s`` of a text-to-video run).

    Raises:
      KeyError: a key of :data:`COMMON_METRICS` missing (a pipeline that forgot to measure a stage).
    """
    metrics.update(values)
    metrics.setdefault("vae_encode_s", 0.0)
    metrics.update(peak_memory_metrics())
    missing = [k for k in COMMON_METRICS if k not in metrics]
    if missing:
        raise KeyError(f"pipeline metrics lack {missing}")
    return metrics


@dataclass
class VideoOutput:
    """The result of every pipeline call, whatever the family.

    Attributes:
      frames: uint8 ``(B, F, H, W, 3)`` RGB (float32 in ``[0, 1]`` with ``output_type="float"``).
      fps: frames per second to write the video at (the model's rate, or the call's ``frame_rate``).
      metrics: timings in seconds, peak memory in bytes and the sizes generated; the keys of
        :data:`COMMON_METRICS` always, a family's own ones besides.
      latents: float32 final latents in the family's layout (before decoding), for checks and reuse.
      extras: what a family returns beyond that (none of the keys above).
      audio: float32 ``(B, channels, samples)`` waveform in [-1, 1] generated with the video (LTX-2), or None.
      sample_rate: the audio's rate in Hz (None without audio).
    """

    frames: np.ndarray
    fps: float = 16
    metrics: dict[str, Any] = field(default_factory=dict)
    latents: np.ndarray | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    audio: np.ndarray | None = None
    sample_rate: int | None = None
