"""How the tiling vision-language processors cut one image into tiles, and how many prompt tokens vLLM 0.32
puts in its place: Llama-4, InternVL (InternVL2/2.5/3, the OpenGVLab and the transformers formats),
Idefics3 / SmolVLM and LLaVA-NeXT. vision.VisionTower asks a `Tiling` for an image's tokens and tiles.

A count is the whole replacement of the image's placeholder, special tokens included (Llama-4's start,
end and tile separators, InternVL's <img> </img>, Idefics3's <fake_token_around_image>, <row_i_col_j>,
<global-img> and row breaks); LLaVA-NeXT's is image tokens only. Each family's processor defaults that
config.json does not hold are the constants below: what vLLM runs with when no mm_processor_kwargs are given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Llama-4: transformers' Llama4ImageProcessor.max_patches (the published preprocessor_config.json says 16
# too); resize_to_max_canvas False (the smallest canvas that needs no downscaling)
LLAMA4_MAX_TILES = 16
# InternVL in the transformers format (model_type internvl): GotOcr2ImageProcessor's min_patches / max_patches,
# and InternVLProcessor's default images_kwargs crop_to_patches=True (tiles and a thumbnail). The OpenGVLab
# format writes min_dynamic_patch / max_dynamic_patch / use_thumbnail in config.json; these stand in when not.
INTERNVL_MIN_TILES, INTERNVL_MAX_TILES, INTERNVL_THUMBNAIL = 1, 12, True
# Idefics3 / SmolVLM: transformers' Idefics3ImageProcessor resizes the longest side to size.longest_edge
# (4 x 364) and cuts tiles of max_image_size (364, the tower's image_size); the published SmolVLM
# preprocessor configs keep the ratio (1536 / 384, 2048 / 512)
IDEFICS3_EDGE_TILES = 4
IDEFICS3_MAX_SIDE = 4096  # transformers' MAX_IMAGE_SIZE: no side beyond it after the resize
# Idefics3 / SmolVLM: the "\n\n" between the last row of tiles and the global image is one token in
# Llama-3's tokenizer (Idefics3-8B) and SmolLM2's; a tokenizer without that merge makes it two
IDEFICS3_BLANK_LINE_TOKENS = 1


@dataclass(frozen=True)
class Tiling:
    kind: str  # "llama4", "internvl", "idefics3" or "llava_next"
    tile: int  # the side of a tile in pixels (the tower's image_size)
    tile_tokens: int  # prompt tokens of one tile (LLaVA-NeXT: of the base image)
    min_tiles: int = 1
    max_tiles: int = 1
    thumbnail: bool = False  # InternVL: a whole-image tile after the tiles when there are several
    longest_edge: int = 0  # Idefics3: images are resized so their longest side is this
    pinpoints: tuple[tuple[int, int], ...] = ()  # LLaVA-NeXT: the (height, width) canvases anyres picks from
    side: int = 0  # LLaVA-NeXT: features per tile side (image_size // patch_size)
    blank_line_tokens: int = IDEFICS3_BLANK_LINE_TOKENS

    def grid(self, width: int, height: int) -> tuple[int, int]:
        """(rows, columns) of local tiles the image is cut into ((0, 0) for an Idefics3 image kept whole)."""
        if self.kind == "llama4":
            return llama4_grid(width, height, self.tile, self.max_tiles)
        if self.kind == "internvl":
            return internvl_grid(width, height, self.tile, self.min_tiles, self.max_tiles)
        if self.kind == "idefics3":
            return idefics3_grid(width, height, self.tile, self.longest_edge)
        return anyres_grid(width, height, self.pinpoints, self.tile)

    def tiles(self, width: int, height: int) -> int:
        """Tiles the encoder runs over: the local ones and the global view (thumbnail, base image)."""
        rows, cols = self.grid(width, height)
        n = rows * cols
        if self.kind == "llava_next":
            return n + 1  # the base image first, then the grid
        if self.kind == "internvl":
            return n + 1 if self.thumbnail and n != 1 else n
        return n + 1 if n > 1 else 1  # Llama-4: a global tile after several; Idefics3: a global image after the split

    def tokens(self, width: int, height: int) -> int:
        rows, cols = self.grid(width, height)
        n, per = rows * cols, self.tile_tokens
        if self.kind == "llama4":
            # <|image_start|>, per tile its patches and an x separator (a y separator ending each row instead),
            # then <|image|>, the global tile's patches and <|image_end|>; one tile: no local tiles at all
            return (n + 1) * per + n + 3 if n > 1 else per + 3
        if self.kind == "internvl":
            return self.tiles(width, height) * per + 2  # <img>, <IMG_CONTEXT> x per tile, </img>
        if self.kind == "idefics3":
            # global view: <fake_token_around_image><global-img> + its tokens, a closing <fake_token_around_image>;
            # each tile: <fake_token_around_image><row_i_col_j> + its tokens; "\n" after each row, "\n\n" the last
            whole = per + 3
            return whole if not n else n * (per + 2) + rows - 1 + self.blank_line_tokens + whole
        return per + anyres_unpadded(width, height, rows, cols, self.side)


def tiling_of(v: dict, patch: int) -> Tiling | None:
    """The tiling a vision dict describes, or None: hfconfig._vision_part copies the top-level keys that tell
    the families apart (downsample_ratio, scale_factor, image_grid_pinpoints) into it."""
    size = v.get("image_size")
    size = size[0] if isinstance(size, (list, tuple)) and size else size
    if not isinstance(size, int) or size <= 0 or patch <= 0:
        return None
    features = (size // patch) ** 2  # per tile, before the pixel shuffle
    if v.get("model_type") == "llama4_vision_model":  # pixel shuffle by pixel_shuffle_ratio (0.5: 4 to 1)
        shuffle = round(1 / float(v.get("pixel_shuffle_ratio") or 0.5) ** 2)
        return Tiling("llama4", size, features // shuffle, max_tiles=LLAMA4_MAX_TILES)
    if isinstance(v.get("downsample_ratio"), (int, float)):  # InternVL; one tile unless dynamic_image_size
        dynamic = v.get("dynamic_image_size", True) is not False
        return Tiling("internvl", size, int(features * v["downsample_ratio"] ** 2),
                      min_tiles=int(v.get("min_dynamic_patch") or INTERNVL_MIN_TILES) if dynamic else 1,
                      max_tiles=int(v.get("max_dynamic_patch") or INTERNVL_MAX_TILES) if dynamic else 1,
                      thumbnail=bool(v.get("use_thumbnail", INTERNVL_THUMBNAIL)))
    if isinstance(v.get("scale_factor"), (int, float)) and v["scale_factor"] > 0:  # Idefics3 / SmolVLM
        return Tiling("idefics3", size, int(features / v["scale_factor"] ** 2),
                      longest_edge=IDEFICS3_EDGE_TILES * size)
    pinpoints = v.get("image_grid_pinpoints")
    if isinstance(pinpoints, list) and pinpoints:  # LLaVA-NeXT: the base image's features, CLIP's class token
        base = features + (1 if str(v.get("model_type", "")).startswith("clip") else 0)  # dropped by "default"
        strategy = v.get("vision_feature_select_strategy") or "default"
        base = 1 if strategy == "class" else base - 1 if strategy == "default" else base
        return Tiling("llava_next", size, base, pinpoints=tuple((int(h), int(w)) for h, w in pinpoints),
                      side=size // patch)
    return None


def llama4_grid(width: int, height: int, tile: int, max_tiles: int) -> tuple[int, int]:
    """Llama-4's best-fit canvas (rows, columns of tiles, at most max_tiles): the smallest scale of at least one
    at which the image fits (else the largest below one), then the smallest canvas at that scale."""
    canvases = [(r, n // r) for n in range(1, max_tiles + 1) for r in range(1, n + 1) if n % r == 0]
    scales = [min(c * tile / width, r * tile / height) for r, c in canvases]
    upscales = [s for s in scales if s >= 1]
    chosen = min(upscales) if upscales else max(scales)
    return min(((r * c, (r, c)) for (r, c), s in zip(canvases, scales) if s == chosen))[1]


def internvl_grid(width: int, height: int, tile: int, min_tiles: int, max_tiles: int) -> tuple[int, int]:
    """InternVL's dynamic tiling (rows, columns): the arrangement of min..max tiles whose aspect ratio is
    closest to the image's; on a tie the larger one while the image covers over half of its area."""
    arrangements = sorted(((c, r) for c in range(1, max_tiles + 1) for r in range(1, max_tiles + 1)
                           if min_tiles <= c * r <= max_tiles), key=lambda a: (a[0] * a[1], a))
    aspect, best, best_diff = width / height, (1, 1), math.inf
    for c, r in arrangements:
        diff = abs(aspect - c / r)
        if diff < best_diff:
            best, best_diff = (c, r), diff
        elif diff == best_diff and width * height > 0.5 * tile * tile * c * r:
            best = (c, r)
    return best[1], best[0]


def idefics3_grid(width: int, height: int, tile: int, longest_edge: int) -> tuple[int, int]:
    """Idefics3's split (rows, columns): the longest side resized to longest_edge (the other side kept in
    proportion, rounded up to even), then tiles of `tile` over it; (0, 0) when it fits in one tile."""
    aspect = width / height
    if width >= height:
        width, height = longest_edge, int(longest_edge / aspect)
        height += height % 2
    else:
        height, width = longest_edge, int(longest_edge * aspect)
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    if max(width, height) > IDEFICS3_MAX_SIDE:
        aspect = width / height
        if width >= height:
            width, height = IDEFICS3_MAX_SIDE, max(1, int(IDEFICS3_MAX_SIDE / aspect))
        else:
            height, width = IDEFICS3_MAX_SIDE, max(1, int(IDEFICS3_MAX_SIDE * aspect))
    rows, cols = -(-height // tile), -(-width // tile)
    return (rows, cols) if rows > 1 or cols > 1 else (0, 0)


def anyres_grid(width: int, height: int, pinpoints: tuple[tuple[int, int], ...], tile: int) -> tuple[int, int]:
    """LLaVA-NeXT's anyres canvas in tiles (rows, columns): the pinpoint keeping the most of the image's pixels
    once scaled to fit, the least padding among equals."""
    best, kept_best, waste_best = (tile, tile), 0, math.inf
    for ph, pw in pinpoints:
        scale = min(pw / width, ph / height)
        kept = min(int(width * scale) * int(height * scale), width * height)
        waste = pw * ph - kept
        if kept > kept_best or (kept == kept_best and waste < waste_best):
            best, kept_best, waste_best = (ph, pw), kept, waste
    return best[0] // tile, best[1] // tile


def anyres_unpadded(width: int, height: int, rows: int, cols: int, side: int) -> int:
    """LLaVA-NeXT's grid features once the padding is cut off, and a newline token per remaining row."""
    h, w = side * rows, side * cols
    if width / height > w / h:
        padding = (h - int(round(height * (w / width), 7))) // 2
        h -= 2 * padding
    else:
        padding = (w - int(round(width * (h / height), 7))) // 2
        w -= 2 * padding
    return h * w + h
