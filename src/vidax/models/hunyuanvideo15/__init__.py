"""HunyuanVideo-1.5 (8.3B): text- and image-to-video with Qwen2.5-VL, byT5 glyph and SigLIP conditioning."""
