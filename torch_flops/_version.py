"""The package version (a leaf: views read it without importing the package)."""

from __future__ import annotations

__version__ = "0.1.0"


def versions() -> dict[str, str]:
    """``{"torch_version": ..., "torch_flops_version": ...}``: what a profile records it was made with."""
    import torch

    return {"torch_version": str(torch.__version__), "torch_flops_version": __version__}
