"""Cosmos-Predict2.5 (2B, 14B): text-, image- and video-to-world with Qwen2.5-VL (Cosmos-Reason1) conditioning."""
