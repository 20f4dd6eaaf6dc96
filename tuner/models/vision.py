"""The vision tower of a multimodal model, from its `vision_config`: parameters, patches per image and
the FLOPs one image costs, which the performance model prices the multimodal warm-up and the encoder by.

Keys are read as the families write them: Qwen2/2.5/3-VL and Qwen3.5 (`depth`, `hidden_size`,
`num_heads`, `patch_size`, `spatial_merge_size`, `temporal_patch_size`, `out_hidden_size`), SigLIP-style
towers of Gemma-3/4, Llama-4, InternVL, Pixtral (`num_hidden_layers`, `hidden_size`, `patch_size`).
An image's patches follow the Qwen processors' rounding (each side to a multiple of patch x merge, at
least one); towers that resize every image to one size (`image_size`, Gemma-3's 896) have that many.
Tiling processors (Llama-4, InternVL, Idefics3 / SmolVLM, LLaVA-NeXT) cut an image into tiles of the tower's
image_size: imagetiles.Tiling counts them and the tokens vLLM puts in the prompt for them; hfconfig copies the
top-level keys they need (downsample_ratio, scale_factor, image_grid_pinpoints, ...) into the vision dict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .imagetiles import Tiling, tiling_of


@dataclass(frozen=True)
class VisionTower:
    depth: int
    hidden: int
    intermediate: int
    patch_size: int
    merge: int = 1  # spatial merge: patches folded into one image token per side
    temporal: int = 1  # temporal patch (Qwen-VL: the same frame twice for an image)
    channels: int = 3
    out_hidden: int = 0  # the projector's output (the language model's hidden size)
    gated: bool = False  # SiLU-gated MLP (Qwen2.5-VL) or a plain two-layer one
    image_size: int | None = None  # fixed-size towers resize every image to this side
    tokens_per_image: int | None = None  # a projector that pools every image to this many (Gemma-3: 256)
    longest_edge: int | None = None  # Pixtral (Mistral-3): images scaled down to fit this side, a break per row
    tiling: Tiling | None = None  # a processor that cuts images into tiles of image_size (imagetiles)

    @property
    def block_params(self) -> int:
        h, inter = self.hidden, self.intermediate
        return 4 * h * h + 4 * h + (3 if self.gated else 2) * h * inter + inter + h + 4 * h

    @property
    def embed_params(self) -> int:
        return self.channels * self.temporal * self.patch_size ** 2 * self.hidden

    @property
    def merger_params(self) -> int:
        folded = self.hidden * self.merge ** 2
        return folded * folded + folded * (self.out_hidden or self.hidden)  # two-layer projector

    @property
    def params(self) -> int:
        return self.depth * self.block_params + self.embed_params + self.merger_params

    def grid(self, width: int, height: int) -> tuple[int, int]:
        """Patches per side (width, height) of an image as the processor resizes it."""
        if self.longest_edge:  # Pixtral: fit in longest_edge (floored), then whole merged patches (ceiled)
            ratio = max(height / self.longest_edge, width / self.longest_edge)
            if ratio > 1:
                width, height = math.floor(width / ratio), math.floor(height / ratio)
            unit = self.patch_size * self.merge
            return (max(1, -(-width // unit)) * self.merge, max(1, -(-height // unit)) * self.merge)
        if self.image_size:
            side = self.image_size // self.patch_size
            return side, side
        unit = self.patch_size * self.merge

        def side(pixels: int) -> int:
            return max(1, round(pixels / unit)) * self.merge

        return side(width), side(height)

    def patches(self, width: int, height: int) -> int:
        """Patches the encoder runs over for one image (a tiling processor: over every tile, global view too)."""
        w, h = self.grid(width, height)
        return w * h * (self.tiling.tiles(width, height) if self.tiling else 1)

    def tokens(self, width: int, height: int) -> int:
        """Image tokens the language model sees: patches folded by the spatial merge, or the fixed count a
        pooling projector gives every image, or what a tiling processor puts in the prompt for the image."""
        if self.tiling:
            return self.tiling.tokens(width, height)
        if self.tokens_per_image:
            return self.tokens_per_image
        if self.longest_edge:  # a token per merged patch, and an [IMG_BREAK] ending each row ([IMG_END] the last)
            w, h = self.grid(width, height)
            return (w // self.merge + 1) * (h // self.merge)
        return self.patches(width, height) // (self.merge ** 2)

    def prompt_tokens(self, width: int, height: int) -> int:
        """What one image adds to a chat prompt: its tokens, and the markers around them that the chat template
        writes and the processor leaves (Qwen-VL's <|vision_start|> and <|vision_end|>; Gemma-3's image sequence
        "\n\n<start_of_image>...<end_of_image>\n\n" in place of its one <start_of_image>). The tiling families',
        Pixtral's and LLaVA's counts already hold the whole replacement of the image's placeholder."""
        if self.tokens_per_image:
            return self.tokens_per_image + 4
        if self.merge > 1 and self.temporal > 1:
            return self.tokens(width, height) + 2
        return self.tokens(width, height)

    def flops(self, patches: int) -> float:
        """One forward pass over `patches` patches: the blocks' matmuls, full attention over the image,
        the patch embedding and the merger."""
        n = max(1, patches)
        dense = 2 * (self.depth * self.block_params + self.embed_params) * n
        attention = 4 * self.depth * self.hidden * n * n
        merger = 2 * self.merger_params * n / self.merge ** 2
        return dense + attention + merger


def vision_tower(config: dict | None) -> VisionTower | None:
    """The tower a `vision_config` describes, or None when it names no depth or width."""
    if not isinstance(config, dict):
        return None
    v = config
    hidden = int(v.get("hidden_size") or v.get("embed_dim") or v.get("width") or 0)
    depth = int(v.get("depth") or v.get("num_hidden_layers") or v.get("layers") or 0)
    if not hidden or not depth:
        return None
    patch = v.get("patch_size") or 14
    patch = int(patch[0] if isinstance(patch, (list, tuple)) else patch)
    pixtral = v.get("model_type") == "pixtral"  # its image_size is the longest side it takes, not a fixed size
    image_size = v.get("image_size") if not (v.get("spatial_merge_size") or pixtral) else None
    tiling = tiling_of(v, patch)
    if tiling:
        image_size = tiling.tile  # written [448, 448] by transformers' InternVL
    return VisionTower(
        depth=depth, hidden=hidden, intermediate=int(v.get("intermediate_size") or 4 * hidden), patch_size=patch,
        merge=int(v.get("spatial_merge_size") or 1), temporal=int(v.get("temporal_patch_size") or 1),
        channels=int(v.get("in_channels") or v.get("num_channels") or 3),
        out_hidden=int(v.get("out_hidden_size") or v.get("projection_dim") or hidden),
        gated=str(v.get("hidden_act", "")).startswith("silu"),
        image_size=int(image_size) if isinstance(image_size, int) and image_size > 0 else None,
        tokens_per_image=int(v["mm_tokens_per_image"]) if isinstance(v.get("mm_tokens_per_image"), int) else None,
        longest_edge=int(v["image_size"]) if pixtral and isinstance(v.get("image_size"), int) else None,
        tiling=tiling,
    )
