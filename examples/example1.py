"""Total FLOPs, time and peak activation memory of ResNet-50 and ViT-B/16 (batch 1, 224x224, CPU).

Run: python examples/example1.py
"""

from __future__ import annotations

import torch

from torch_flops import TorchFLOPsByFX, zoo


def profile(name: str) -> None:
    entry = zoo.get(name)
    model = entry.build().eval()
    (images,) = entry.example_inputs(batch_size=1, image_size=224)
    print(f"== {name}: {entry.description}")
    counter = TorchFLOPsByFX(model)  # warmup=1 would time warm kernels, at the cost of one more run
    with torch.no_grad():
        counter.propagate(images)
    counter.print_total_flops()
    counter.print_total_time()
    counter.print_max_memory()
    print()


def main() -> None:
    for name in ("resnet50", "vit_b16"):
        profile(name)


if __name__ == "__main__":
    main()
