"""The model protocol now lives with its consumer, `coolsd.decoding.protocol`; this name stays for older imports."""

from coolsd.decoding.protocol import Drafter, ImageTokenizer, ModelStep, TokenModel, causal_mask

__all__ = ["Drafter", "ImageTokenizer", "ModelStep", "TokenModel", "causal_mask"]
