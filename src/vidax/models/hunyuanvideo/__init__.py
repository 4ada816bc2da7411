"""HunyuanVideo 13B: text-to-video and image-to-video (Tencent-Hunyuan/HunyuanVideo, diffusers HunyuanVideo*)."""
