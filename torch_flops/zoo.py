"""Reference model zoo for ``torch_flops``.

Plain-PyTorch implementations of a handful of well-known architectures, used as
profiling targets, examples and test fixtures.  Every model here

* is written from the papers cited next to it, with ``torch`` only (no
  torchvision / timm / transformers),
* is traceable by :func:`torch.fx.symbolic_trace` without ``concrete_args``
  (no data-dependent Python control flow in ``forward``; tensor sizes are only
  ever passed on as values to other ops),
* can be built on the meta device (``with torch.device("meta"): build()``) and
  run on meta inputs, so that even Llama-2-70B can be inspected without
  allocating its weights.

Each model has an example-input builder, and :data:`ZOO` maps a short name to a
:class:`ZooEntry` bundling the builder, the example-input function and a
one-line description.  :func:`get` looks an entry up by name.

The two decoders (GPT-2, Llama) also decode with a KV cache: ``model(ids,
cache=KVCache())`` appends each layer's keys and values to the cache and
attends over all of them; :func:`generate` is their greedy decode loop and
:func:`generation_inputs` their meta inputs for
:func:`torch_flops.sweep_generation`.  Without ``cache`` (and under
``torch.fx`` tracing) ``forward`` is the plain causal forward.

Parameter counts at the default configurations match the usual reference
numbers: ResNet-50 25,557,032; ViT-B/16 86,567,656; MobileNetV3-Large
5,483,032; GPT-2 small (tied LM head) 124,439,808.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "GPT2",
    "GPT2MLP",
    "ZOO",
    "Bottleneck",
    "DoubleConv",
    "GPT2Attention",
    "GPT2Block",
    "GPT2Config",
    "InvertedResidual",
    "KVCache",
    "KVLayer",
    "Llama",
    "LlamaAttention",
    "LlamaBlock",
    "LlamaConfig",
    "LlamaMLP",
    "MobileNetV3",
    "RMSNorm",
    "ResNet",
    "SqueezeExcitation",
    "UNet",
    "ViTAttention",
    "ViTBlock",
    "VisionTransformer",
    "ZooEntry",
    "apply_rotary",
    "generate",
    "generation_inputs",
    "get",
    "gpt2",
    "gpt2_example_inputs",
    "image_example_inputs",
    "llama",
    "llama2_70b_config",
    "llama_example_inputs",
    "mobilenet_v3_large",
    "mobilenet_v3_large_example_inputs",
    "resnet50",
    "resnet50_example_inputs",
    "rotate_half",
    "unet",
    "unet_example_inputs",
    "vit_b16",
    "vit_b16_example_inputs",
]

# --------------------------------------------------------------------------- #
# Example-input helpers
# --------------------------------------------------------------------------- #


def _resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` means CPU; strings are converted to :class:`torch.device`."""
    if device is None:
        return torch.device("cpu")
    return torch.device(device)


def _image_input(
    batch_size: int,
    channels: int,
    height: int,
    width: int,
    device: str | torch.device | None,
    dtype: torch.dtype,
    seed: int,
) -> torch.Tensor:
    """A reproducible ``(batch, channels, height, width)`` float tensor.

    Values come from a CPU :class:`torch.Generator` with a fixed seed and are
    then moved to ``device``; on the meta device an empty tensor is returned.
    """
    dev = _resolve_device(device)
    shape = (batch_size, channels, height, width)
    if dev.type == "meta":
        return torch.empty(shape, dtype=dtype, device=dev)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(shape, generator=gen, dtype=torch.float32, device="cpu")
    return x.to(device=dev, dtype=dtype)


def _token_input(
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    device: str | torch.device | None,
    seed: int,
) -> torch.Tensor:
    """Reproducible random ``(batch, seq_len)`` token ids in ``[0, vocab_size)``."""
    dev = _resolve_device(device)
    shape = (batch_size, seq_len)
    if dev.type == "meta":
        return torch.empty(shape, dtype=torch.long, device=dev)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(
        0, vocab_size, shape, generator=gen, dtype=torch.long, device="cpu"
    )
    return ids.to(dev)


# --------------------------------------------------------------------------- #
# ResNet-50 — He, Zhang, Ren, Sun, "Deep Residual Learning for Image
# Recognition", CVPR 2016 (arXiv:1512.03385).  "v1.5" variant: the stride of a
# downsampling bottleneck sits on the 3x3 convolution instead of the first 1x1.
# --------------------------------------------------------------------------- #


class Bottleneck(nn.Module):
    """1x1 reduce -> 3x3 (strided) -> 1x1 expand (x4), with identity/projection shortcut."""

    expansion: int = 4

    def __init__(self, in_channels: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )
        else:
            self.downsample = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """Bottleneck ResNet: 7x7 stem, max-pool, four stages, global pool, linear head."""

    def __init__(
        self, layers: tuple[int, int, int, int] = (3, 4, 6, 3), num_classes: int = 1000
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        in_channels = 64
        stages: list[nn.Sequential] = []
        for i, (blocks, width) in enumerate(zip(layers, (64, 128, 256, 512))):
            stride = 1 if i == 0 else 2
            mods: list[nn.Module] = []
            for b in range(blocks):
                mods.append(Bottleneck(in_channels, width, stride if b == 0 else 1))
                in_channels = width * Bottleneck.expansion
            stages.append(nn.Sequential(*mods))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(in_channels, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet50(num_classes: int = 1000) -> ResNet:
    """ResNet-50 v1.5 (25,557,032 parameters at ``num_classes=1000``)."""
    return ResNet((3, 4, 6, 3), num_classes=num_classes)


def image_example_inputs(
    batch_size: int = 1,
    device: str | torch.device | None = None,
    image_size: int = 224,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    in_channels: int = 3,
) -> tuple[torch.Tensor]:
    """``(images,)`` with images of shape ``(batch_size, in_channels, image_size, image_size)``:
    the example inputs of the image models (ResNet-50, ViT-B/16, MobileNetV3)."""
    return (_image_input(batch_size, in_channels, image_size, image_size, device, dtype, seed),)


resnet50_example_inputs = image_example_inputs


# --------------------------------------------------------------------------- #
# ViT — Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for
# Image Recognition at Scale", ICLR 2021 (arXiv:2010.11929).  Patch embedding
# by a strided convolution, class token, learned position embedding, pre-norm
# encoder blocks with explicit softmax attention and a GELU MLP.
# --------------------------------------------------------------------------- #


class ViTAttention(nn.Module):
    """Multi-head self-attention written out explicitly (QK^T * scale, softmax, @V)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads != 0:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, N, 3*D) -> (3, B, heads, N, head_dim)
        qkv = (
            self.qkv(x)
            .unflatten(-1, (3, self.heads, self.head_dim))
            .permute(2, 0, 3, 1, 4)
        )
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).flatten(2)
        return self.proj(out)


class ViTBlock(nn.Module):
    """Pre-norm transformer encoder block: x + MSA(LN(x)); x + MLP(LN(x))."""

    def __init__(self, dim: int, heads: int, mlp_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=eps)
        self.attn = ViTAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    """ViT classifier reading the class token after a final LayerNorm."""

    def __init__(
        self,
        image_size: int = 224,
        patch: int = 16,
        num_classes: int = 1000,
        dim: int = 768,
        depth: int = 12,
        heads: int = 12,
        mlp_dim: int = 3072,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        if image_size % patch != 0:
            raise ValueError(
                f"image_size ({image_size}) must be divisible by patch ({patch})"
            )
        self.image_size = image_size
        self.patch = patch
        num_patches = (image_size // patch) ** 2
        self.conv_proj = nn.Conv2d(in_channels, dim, kernel_size=patch, stride=patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.empty(1, num_patches + 1, dim))
        nn.init.normal_(self.pos_embedding, std=0.02)
        self.blocks = nn.Sequential(
            *[ViTBlock(dim, heads, mlp_dim) for _ in range(depth)]
        )
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(x).flatten(2).transpose(1, 2)  # (B, N, D)
        cls = self.class_token.expand(x.size(0), -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embedding
        x = self.ln(self.blocks(x))
        return self.head(x[:, 0])


def vit_b16(
    image_size: int = 224,
    num_classes: int = 1000,
    *,
    patch: int = 16,
    dim: int = 768,
    depth: int = 12,
    heads: int = 12,
    mlp_dim: int = 3072,
) -> VisionTransformer:
    """ViT-B/16 (86,567,656 parameters at defaults); keyword args allow smaller configs."""
    return VisionTransformer(
        image_size=image_size,
        patch=patch,
        num_classes=num_classes,
        dim=dim,
        depth=depth,
        heads=heads,
        mlp_dim=mlp_dim,
    )


vit_b16_example_inputs = image_example_inputs


# --------------------------------------------------------------------------- #
# MobileNetV3-Large — Howard et al., "Searching for MobileNetV3", ICCV 2019
# (arXiv:1905.02244), Table 1.  Inverted residuals (Sandler et al. 2018) with
# optional squeeze-and-excitation (Hu et al. 2018) using a hard-sigmoid gate,
# Hardswish / ReLU activations.
# --------------------------------------------------------------------------- #


def _make_divisible(value: float, divisor: int = 8) -> int:
    """Round ``value`` to a multiple of ``divisor`` without dropping more than 10%."""
    new_value = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if new_value < 0.9 * value:
        new_value += divisor
    return new_value


class SqueezeExcitation(nn.Module):
    """SE block: global average pool -> 1x1 conv -> ReLU -> 1x1 conv -> Hardsigmoid gate."""

    def __init__(self, channels: int, squeeze_channels: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze_channels, 1)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(squeeze_channels, channels, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.gate(self.fc2(self.relu(self.fc1(self.avgpool(x)))))
        return x * scale


def _conv_bn_act(
    in_channels: int,
    out_channels: int,
    kernel_size: int,
    stride: int,
    groups: int,
    activation: type[nn.Module] | None,
) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size,
            stride=stride,
            padding=(kernel_size - 1) // 2,
            groups=groups,
            bias=False,
        ),
        nn.BatchNorm2d(out_channels, eps=0.001, momentum=0.01),
    ]
    if activation is not None:
        layers.append(activation())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """Expand (1x1) -> depthwise (kxk) -> [SE] -> project (1x1), residual when shapes allow."""

    def __init__(
        self,
        in_channels: int,
        kernel_size: int,
        expanded_channels: int,
        out_channels: int,
        use_se: bool,
        activation: type[nn.Module],
        stride: int,
    ) -> None:
        super().__init__()
        self.use_residual = stride == 1 and in_channels == out_channels
        layers: list[nn.Module] = []
        if expanded_channels != in_channels:
            layers.append(
                _conv_bn_act(in_channels, expanded_channels, 1, 1, 1, activation)
            )
        layers.append(
            _conv_bn_act(
                expanded_channels,
                expanded_channels,
                kernel_size,
                stride,
                expanded_channels,
                activation,
            )
        )
        if use_se:
            layers.append(
                SqueezeExcitation(
                    expanded_channels, _make_divisible(expanded_channels // 4, 8)
                )
            )
        layers.append(_conv_bn_act(expanded_channels, out_channels, 1, 1, 1, None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        if self.use_residual:  # structural (fixed at construction), not data-dependent
            out = out + x
        return out


# (in, kernel, expanded, out, use_se, activation, stride) — Table 1 of the paper.
_MOBILENET_V3_LARGE: tuple[tuple[int, int, int, int, bool, str, int], ...] = (
    (16, 3, 16, 16, False, "RE", 1),
    (16, 3, 64, 24, False, "RE", 2),
    (24, 3, 72, 24, False, "RE", 1),
    (24, 5, 72, 40, True, "RE", 2),
    (40, 5, 120, 40, True, "RE", 1),
    (40, 5, 120, 40, True, "RE", 1),
    (40, 3, 240, 80, False, "HS", 2),
    (80, 3, 200, 80, False, "HS", 1),
    (80, 3, 184, 80, False, "HS", 1),
    (80, 3, 184, 80, False, "HS", 1),
    (80, 3, 480, 112, True, "HS", 1),
    (112, 3, 672, 112, True, "HS", 1),
    (112, 5, 672, 160, True, "HS", 2),
    (160, 5, 960, 160, True, "HS", 1),
    (160, 5, 960, 160, True, "HS", 1),
)


class MobileNetV3(nn.Module):
    """MobileNetV3 backbone + classifier (Linear -> Hardswish -> Dropout -> Linear)."""

    def __init__(
        self,
        config: tuple[
            tuple[int, int, int, int, bool, str, int], ...
        ] = _MOBILENET_V3_LARGE,
        last_channels: int = 1280,
        num_classes: int = 1000,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        acts: dict[str, type[nn.Module]] = {"RE": nn.ReLU, "HS": nn.Hardswish}
        first = config[0][0]
        layers: list[nn.Module] = [_conv_bn_act(3, first, 3, 2, 1, nn.Hardswish)]
        for cin, k, exp, cout, se, act, stride in config:
            layers.append(InvertedResidual(cin, k, exp, cout, se, acts[act], stride))
        last_in = config[-1][3]
        last_conv = 6 * last_in
        layers.append(_conv_bn_act(last_in, last_conv, 1, 1, 1, nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(last_conv, last_channels),
            nn.Hardswish(),
            nn.Dropout(p=dropout),
            nn.Linear(last_channels, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(self.avgpool(self.features(x)), 1)
        return self.classifier(x)


def mobilenet_v3_large(num_classes: int = 1000) -> MobileNetV3:
    """MobileNetV3-Large (5,483,032 parameters at ``num_classes=1000``)."""
    return MobileNetV3(_MOBILENET_V3_LARGE, last_channels=1280, num_classes=num_classes)


mobilenet_v3_large_example_inputs = image_example_inputs


# --------------------------------------------------------------------------- #
# GPT-2 — Radford et al., "Language Models are Unsupervised Multitask
# Learners", 2019.  Decoder-only transformer with pre-LayerNorm blocks, learned
# absolute position embedding, tanh-GELU MLP and an LM head tied to the token
# embedding.
# --------------------------------------------------------------------------- #


@dataclass
class KVLayer:
    """One layer's cached keys and values, ``(batch, kv_heads, tokens, head_dim)`` each."""

    keys: torch.Tensor
    values: torch.Tensor


class KVCache:
    """A dynamic KV cache for the zoo's decoders: per layer the keys and values of every token so
    far, grown by concatenation on the tokens dimension at each call (as transformers'
    ``DynamicCache`` does), so a decode step's attention reads the whole context."""

    def __init__(self, layers: list[KVLayer] | None = None) -> None:
        self.layers: list[KVLayer] = list(layers or [])

    @property
    def length(self) -> int:
        """Tokens cached per sequence (0 before the first call)."""
        return int(self.layers[0].keys.shape[-2]) if self.layers else 0

    def update(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this call's ``keys``/``values`` of ``layer``; returns all of that layer's."""
        if layer == len(self.layers):  # kept compact (not a view holding a fused QKV output alive)
            self.layers.append(KVLayer(keys.contiguous(), values.contiguous()))
        else:
            held = self.layers[layer]
            held.keys = torch.cat((held.keys, keys), dim=-2)
            held.values = torch.cat((held.values, values), dim=-2)
        return self.layers[layer].keys, self.layers[layer].values

    def __repr__(self) -> str:
        return f"KVCache({len(self.layers)} layers, {self.length} tokens)"


def _kept(logits_to_keep: Any) -> int | None:
    """How many last positions get logits: all (None) without ``logits_to_keep`` and under
    ``torch.fx`` tracing (the traced graph is the all-positions forward)."""
    if logits_to_keep is None or isinstance(logits_to_keep, torch.fx.Proxy):
        return None
    if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) or logits_to_keep < 1:
        raise ValueError(f"logits_to_keep must be an int >= 1 or None, got {logits_to_keep!r}")
    return logits_to_keep


def _cache_of(cache: Any) -> KVCache | None:
    """``cache`` when it is a :class:`KVCache`; None without one, and for the placeholder
    ``torch.fx`` passes while tracing (the traced graph is the cache-less forward)."""
    if cache is None or isinstance(cache, torch.fx.Proxy):
        return None
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a torch_flops.zoo.KVCache, got {type(cache).__name__}")
    return cache


def _cached_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVCache, layer: int,
                      enable_gqa: bool = False) -> torch.Tensor:
    """Attention of this call's queries over the cached keys and values plus this call's: causal,
    with the queries at the end of the context (a decode step's one query sees every key)."""
    k, v = cache.update(layer, k, v)
    queries, keys = q.shape[-2], k.shape[-2]
    gqa: dict[str, Any] = {"enable_gqa": True} if enable_gqa else {}
    if queries == keys:  # the prefill: nothing cached before
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
    if queries == 1:
        return F.scaled_dot_product_attention(q, k, v, **gqa)
    # query i (at position keys - queries + i) sees keys 0 .. keys - queries + i
    mask = torch.ones(queries, keys, dtype=torch.bool, device=q.device).tril(keys - queries)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **gqa)


@dataclass
class GPT2Config:
    """GPT-2 hyper-parameters; defaults are GPT-2 small (124M)."""

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    layer_norm_epsilon: float = 1e-5


class GPT2Attention(nn.Module):
    """Causal multi-head self-attention via ``F.scaled_dot_product_attention``."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        if config.n_embd % config.n_head != 0:
            raise ValueError("n_embd must be divisible by n_head")
        self.n_head = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        # (B, T, 3C) -> (3, B, heads, T, head_dim)
        qkv = (
            self.c_attn(x)
            .unflatten(-1, (3, self.n_head, self.head_dim))
            .permute(2, 0, 3, 1, 4)
        )
        q, k, v = qkv[0], qkv[1], qkv[2]
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = _cached_attention(q, k, v, cache, layer)
        return self.c_proj(y.transpose(1, 2).flatten(2))


class GPT2MLP(nn.Module):
    """Linear(C, 4C) -> GELU(tanh) -> Linear(4C, C)."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(nn.Module):
    """Pre-LN block: x + attn(ln_1(x)); x + mlp(ln_2(x))."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(config)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        x = x + (self.attn(self.ln_1(x)) if cache is None else self.attn(self.ln_1(x), cache, layer))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """GPT-2 language model returning logits of shape ``(batch, seq, vocab_size)``."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList([GPT2Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.01)
        self.lm_head.weight = self.wte.weight  # weight tying

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None,
                logits_to_keep: int | None = None) -> torch.Tensor:
        """Logits of every position (of the last ``logits_to_keep`` only, as a decode loop needs);
        with ``cache``, the positions follow the cached tokens and each layer's keys and values are
        appended to it."""
        kv, keep = _cache_of(cache), _kept(logits_to_keep)
        if kv is None:
            positions = torch.arange(input_ids.size(1), device=input_ids.device)
        else:
            past = kv.length
            positions = torch.arange(past, past + input_ids.size(1), device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(positions)
        for i, block in enumerate(self.h):
            x = block(x) if kv is None else block(x, kv, i)
        return self.lm_head(self.ln_f(x if keep is None else x[:, -keep:]))


def gpt2(config: GPT2Config | None = None, **overrides: Any) -> GPT2:
    """GPT-2 (small by default: 124,439,808 parameters with the tied LM head).

    ``overrides`` replace fields of ``config`` (or of the default config), e.g.
    ``gpt2(n_layer=2, n_embd=64, n_head=4, vocab_size=1000)``.
    """
    return GPT2(dataclasses.replace(config or GPT2Config(), **overrides))


def gpt2_example_inputs(
    batch_size: int = 1,
    device: str | torch.device | None = None,
    seq_len: int = 128,
    vocab_size: int = 50257,
    seed: int = 0,
) -> tuple[torch.Tensor]:
    """``(input_ids,)``: a ``(batch_size, seq_len)`` LongTensor of ids in ``[0, vocab_size)``
    (the token models' example inputs; Llama's default vocabulary is 32000)."""
    return (_token_input(batch_size, seq_len, vocab_size, device, seed),)


# --------------------------------------------------------------------------- #
# Llama — Touvron et al., "LLaMA: Open and Efficient Foundation Language
# Models", 2023 (arXiv:2302.13971) and "Llama 2", 2023 (arXiv:2307.09288).
# RMSNorm (Zhang & Sennrich 2019), rotary position embedding (Su et al.,
# "RoFormer", arXiv:2104.09864), SwiGLU MLP (Shazeer 2020), grouped-query
# attention (Ainslie et al. 2023).
# --------------------------------------------------------------------------- #


def _torch_version() -> tuple[int, int]:
    parts = torch.__version__.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):  # pragma: no cover - exotic version strings
        return (0, 0)


#: ``F.scaled_dot_product_attention(..., enable_gqa=True)`` exists from torch 2.5.
_HAS_SDPA_GQA: bool = _torch_version() >= (2, 5)


@dataclass
class LlamaConfig:
    """Llama hyper-parameters; the defaults are a small model for tests/examples."""

    vocab_size: int = 32000
    hidden_size: int = 256
    intermediate_size: int = 688
    num_layers: int = 4
    num_heads: int = 8
    num_kv_heads: int = 2
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    max_positions: int = 2048
    tie_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def llama2_70b_config() -> LlamaConfig:
    """The Llama-2-70B shape (68,976,648,192 parameters, untied LM head)."""
    return LlamaConfig(
        vocab_size=32000,
        hidden_size=8192,
        intermediate_size=28672,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        rope_theta=10000.0,
        rms_eps=1e-5,
        max_positions=4096,
        tie_embeddings=False,
    )


class RMSNorm(nn.Module):
    """Root-mean-square layer norm: ``x * rsqrt(mean(x^2) + eps) * weight``."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last dimension (halves)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (``..., seq, head_dim``) by the position angles in ``cos``/``sin`` (``seq, head_dim``)."""
    return x * cos + rotate_half(x) * sin


class LlamaAttention(nn.Module):
    """Causal grouped-query attention with rotary embeddings, bias-free projections."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        if config.hidden_size % config.num_heads != 0:
            raise ValueError("hidden_size must be divisible by num_heads")
        if config.num_heads % config.num_kv_heads != 0:
            raise ValueError("num_heads must be divisible by num_kv_heads")
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.q_proj = nn.Linear(
            config.hidden_size, self.num_heads * self.head_dim, bias=False
        )
        self.k_proj = nn.Linear(
            config.hidden_size, self.num_kv_heads * self.head_dim, bias=False
        )
        self.v_proj = nn.Linear(
            config.hidden_size, self.num_kv_heads * self.head_dim, bias=False
        )
        self.o_proj = nn.Linear(
            self.num_heads * self.head_dim, config.hidden_size, bias=False
        )

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None = None, layer: int = 0
    ) -> torch.Tensor:
        q = (
            self.q_proj(x)
            .unflatten(-1, (self.num_heads, self.head_dim))
            .transpose(1, 2)
        )
        k = (
            self.k_proj(x)
            .unflatten(-1, (self.num_kv_heads, self.head_dim))
            .transpose(1, 2)
        )
        v = (
            self.v_proj(x)
            .unflatten(-1, (self.num_kv_heads, self.head_dim))
            .transpose(1, 2)
        )
        q = apply_rotary(q, cos, sin)
        k = apply_rotary(k, cos, sin)
        # Branches below depend only on the config (and whether a cache is given), never on tensor values.
        if cache is not None:  # the cache keeps the kv_heads keys and values; attention shares them (GQA)
            if self.num_kv_heads != self.num_heads and not _HAS_SDPA_GQA:  # pragma: no cover - torch < 2.5
                raise RuntimeError("decoding with a KV cache under grouped-query attention needs torch >= 2.5")
            y = _cached_attention(q, k, v, cache, layer, enable_gqa=self.num_kv_heads != self.num_heads)
        elif self.num_kv_heads == self.num_heads:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif _HAS_SDPA_GQA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # pragma: no cover - torch < 2.5
            groups = self.num_heads // self.num_kv_heads
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).flatten(2))


class LlamaMLP(nn.Module):
    """SwiGLU: ``down_proj(silu(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(
            config.hidden_size, config.intermediate_size, bias=False
        )
        self.up_proj = nn.Linear(
            config.hidden_size, config.intermediate_size, bias=False
        )
        self.down_proj = nn.Linear(
            config.intermediate_size, config.hidden_size, bias=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    """Pre-RMSNorm decoder layer: attention then SwiGLU MLP, each with a residual."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_eps)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_eps)
        self.mlp = LlamaMLP(config)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None = None, layer: int = 0
    ) -> torch.Tensor:
        normed = self.input_layernorm(x)
        x = x + (self.self_attn(normed, cos, sin) if cache is None else self.self_attn(normed, cos, sin, cache, layer))
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """Llama decoder-only language model returning ``(batch, seq, vocab_size)`` logits.

    Rotary angles are computed in ``forward`` from ``arange(seq)`` positions with
    plain ops, so the model holds no buffers and materialises cleanly from the
    meta device (e.g. via ``to_empty``).
    """

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        if config.head_dim % 2 != 0:
            raise ValueError("head_dim must be even for rotary embeddings")
        self.config = config
        self.head_dim = config.head_dim
        self.rope_theta = float(config.rope_theta)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [LlamaBlock(config) for _ in range(config.num_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def rotary(
        self, input_ids: torch.Tensor, dtype: torch.dtype, past: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` of shape ``(seq, head_dim)`` for positions ``past..past+seq-1``."""
        device = input_ids.device
        exponent = (
            torch.arange(0, self.head_dim, 2, device=device, dtype=torch.float32)
            / self.head_dim
        )
        inv_freq = 1.0 / torch.pow(self.rope_theta, exponent)
        if past:
            positions = torch.arange(past, past + input_ids.size(1), device=device, dtype=torch.float32)
        else:
            positions = torch.arange(input_ids.size(1), device=device, dtype=torch.float32)
        angles = positions[:, None] * inv_freq[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None,
                logits_to_keep: int | None = None) -> torch.Tensor:
        """Logits of every position; ``cache`` and ``logits_to_keep`` as in :meth:`GPT2.forward`
        (rotary positions after the cached tokens)."""
        kv, keep = _cache_of(cache), _kept(logits_to_keep)
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary(input_ids, x.dtype, 0 if kv is None else kv.length)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin) if kv is None else layer(x, cos, sin, kv, i)
        return self.lm_head(self.norm(x if keep is None else x[:, -keep:]))


def llama(config: LlamaConfig | None = None, **overrides: Any) -> Llama:
    """Llama model; ``config`` defaults to a small :class:`LlamaConfig`.

    ``overrides`` replace config fields, e.g. ``llama(num_layers=2)``; use
    ``llama(llama2_70b_config())`` (on the meta device!) for Llama-2-70B.
    """
    return Llama(dataclasses.replace(config or LlamaConfig(), **overrides))


llama_example_inputs = functools.partial(gpt2_example_inputs, vocab_size=32000)


def generate(model: nn.Module, input_ids: torch.Tensor, max_new_tokens: int, *,
             cache: KVCache | None = None) -> torch.Tensor:
    """Greedy decoding with a KV cache for the zoo's decoders (:class:`GPT2`, :class:`Llama`): one
    call over the prompt (the prefill), then one call per further token over the last token alone
    (the decode steps), each computing the logits of its last position only (``logits_to_keep=1``,
    as transformers' ``generate`` does); returns the prompt followed by the ``max_new_tokens`` new
    tokens. Give
    ``cache`` (an empty :class:`KVCache`) to read it afterwards, e.g. as
    :func:`torch_flops.profile_generate`'s ``kv_cache``::

        cache = zoo.KVCache()
        gp = torch_flops.profile_generate(model, loop=lambda: zoo.generate(model, ids, 32, cache=cache),
                                          kv_cache=lambda: cache, max_new_tokens=32)
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[1] < 1:
        raise ValueError("input_ids must be a (batch, tokens) tensor of token ids with at least one token")
    cache = KVCache() if cache is None else cache
    if cache.layers:
        raise ValueError(f"generate() starts from an empty cache; this one holds {cache.length} tokens")
    tokens = [input_ids]
    with torch.no_grad():
        logits = model(input_ids, cache=cache, logits_to_keep=1)
        for step in range(max_new_tokens):
            next_ids = logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(next_ids)
            if step + 1 < max_new_tokens:
                logits = model(next_ids, cache=cache, logits_to_keep=1)
    return torch.cat(tokens, dim=1)


def generation_inputs(model: nn.Module) -> Callable[[int, int, int], dict[str, Any]]:
    """The meta inputs of one call of a zoo decoder for :func:`torch_flops.sweep_generation`:
    ``(batch, tokens_in, cache_length) -> {"input_ids": ..., "cache": ...}``, the cache holding
    ``cache_length`` tokens of (meta) keys and values per layer, in the model's dtype."""
    config = getattr(model, "config", None)
    if isinstance(config, GPT2Config):
        layers, kv_heads, head_dim = config.n_layer, config.n_head, config.n_embd // config.n_head
    elif isinstance(config, LlamaConfig):
        layers, kv_heads, head_dim = config.num_layers, config.num_kv_heads, config.head_dim
    else:
        raise TypeError(f"generation_inputs() is for the zoo's GPT2 and Llama, got {type(model).__name__}")
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)

    def inputs(batch: int, tokens_in: int, cache_length: int) -> dict[str, Any]:
        shape = (batch, kv_heads, cache_length, head_dim)
        layer = [KVLayer(torch.empty(shape, dtype=dtype, device="meta"), torch.empty(shape, dtype=dtype, device="meta"))
                 for _ in range(layers if cache_length else 0)]
        return {"input_ids": torch.empty((batch, tokens_in), dtype=torch.long, device="meta"), "cache": KVCache(layer)}

    return inputs


# --------------------------------------------------------------------------- #
# UNet — Ronneberger, Fischer, Brox, "U-Net: Convolutional Networks for
# Biomedical Image Segmentation", MICCAI 2015 (arXiv:1505.04597).  Small
# variant with padded convolutions and batch norm so output size == input size.
# --------------------------------------------------------------------------- #


class DoubleConv(nn.Module):
    """(3x3 conv -> BN -> ReLU) x 2."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class UNet(nn.Module):
    """Encoder (DoubleConv + MaxPool) / bottleneck / decoder (ConvTranspose + concat + DoubleConv)."""

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 2,
        base_channels: int = 16,
        depth: int = 3,
    ) -> None:
        super().__init__()
        if depth < 1:
            raise ValueError("depth must be >= 1")
        widths = [base_channels * 2**i for i in range(depth + 1)]
        self.down = nn.ModuleList()
        cin = in_channels
        for w in widths[:-1]:
            self.down.append(DoubleConv(cin, w))
            cin = w
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = DoubleConv(widths[-2], widths[-1])
        self.up = nn.ModuleList()
        self.up_conv = nn.ModuleList()
        for i in range(depth, 0, -1):
            self.up.append(
                nn.ConvTranspose2d(widths[i], widths[i - 1], kernel_size=2, stride=2)
            )
            self.up_conv.append(DoubleConv(2 * widths[i - 1], widths[i - 1]))
        self.head = nn.Conv2d(widths[0], num_classes, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips: list[torch.Tensor] = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottleneck(x)
        for up, conv, skip in zip(self.up, self.up_conv, reversed(skips)):
            x = conv(torch.cat([up(x), skip], dim=1))
        return self.head(x)


def unet(
    in_channels: int = 3, num_classes: int = 2, base_channels: int = 16, depth: int = 3
) -> UNet:
    """Small UNet (base 16 channels, depth 3); spatial size must be divisible by ``2**depth``."""
    return UNet(
        in_channels=in_channels,
        num_classes=num_classes,
        base_channels=base_channels,
        depth=depth,
    )


def unet_example_inputs(
    batch_size: int = 1,
    device: str | torch.device | None = None,
    image_size: int = 64,
    in_channels: int = 3,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> tuple[torch.Tensor]:
    """``(images,)`` with images of shape ``(batch_size, in_channels, image_size, image_size)``."""
    return image_example_inputs(batch_size, device, image_size, dtype, seed, in_channels)


# --------------------------------------------------------------------------- #
# Registry
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class ZooEntry:
    """A zoo model: its builder, example-input builder and a short description.

    ``example_inputs(batch_size=1, device=None, **kw)`` returns the positional
    arguments for ``model(*args)``.
    """

    name: str
    build: Callable[..., nn.Module]
    example_inputs: Callable[..., tuple[torch.Tensor, ...]]
    description: str


ZOO: dict[str, ZooEntry] = {
    name: ZooEntry(name, build, inputs, description)
    for name, build, inputs, description in (
        ("resnet50", resnet50, resnet50_example_inputs,
         "ResNet-50 v1.5 (He et al. 2015), 25.6M params, input (B, 3, 224, 224)"),
        ("vit_b16", vit_b16, vit_b16_example_inputs,
         "ViT-B/16 (Dosovitskiy et al. 2020) with explicit attention, 86.6M params, input (B, 3, 224, 224)"),
        ("mobilenet_v3_large", mobilenet_v3_large, mobilenet_v3_large_example_inputs,
         "MobileNetV3-Large (Howard et al. 2019), 5.5M params, input (B, 3, 224, 224)"),
        ("gpt2", gpt2, gpt2_example_inputs,
         "GPT-2 small (Radford et al. 2019), 124M params (tied head), input ids (B, 128)"),
        ("llama", llama, llama_example_inputs,
         "Small Llama (Touvron et al. 2023): RMSNorm, RoPE, SwiGLU, GQA; input ids (B, 128)"),
        ("unet", unet, unet_example_inputs,
         "Small UNet (Ronneberger et al. 2015), base 16 channels, depth 3, input (B, 3, 64, 64)"),
    )
}


def get(name: str) -> ZooEntry:
    """Return the :class:`ZooEntry` called ``name``; ``KeyError`` lists the known names."""
    try:
        return ZOO[name]
    except KeyError:
        raise KeyError(
            f"unknown zoo model {name!r}; available: {', '.join(sorted(ZOO))}"
        ) from None
