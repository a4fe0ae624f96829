"""Images: a vision projector (libmtmd) that turns image parts into prompt chunks.

The chat template writes the projector's marker where each image goes;
`Projector.tokenize` splits the rendered prompt into text tokens and image
chunks. The engine keeps one token list per prompt, with `IMAGE_TOKEN` in the
positions an image fills, and evaluates each image chunk into the slot's
sequence with `Projector.evaluate` when the prompt reaches it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from spark.engine.bindings import mt
from spark.engine.image_header import MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE, image_format, image_size, too_large
from spark.engine.native import Context, LogBridge, Model
from spark.errors import InvalidRequest, ModelFileError, RunnerFailed
from spark.types import ImagePart

log = logging.getLogger("spark.engine.mtmd")

IMAGE_TOKEN = -1  # stands for one position of an image chunk in a prompt's token list

_mtmd_log = LogBridge(log)


@dataclass(slots=True, eq=False)
class ImageChunk:
    """One image of a prompt: where it starts in the token list and how many positions it fills."""

    start: int
    n_tokens: int
    chunk: int  # mtmd_input_chunk pointer, owned by the prompt's chunk list


@dataclass(slots=True, eq=False)
class PromptMedia:
    """A prompt's tokens (`IMAGE_TOKEN` where images go) and its image chunks; free with `close()`."""

    tokens: list[int]
    images: list[ImageChunk]
    _chunks: int | None = field(default=None, repr=False)

    @property
    def first_image(self) -> int:
        return self.images[0].start

    def image_at(self, pos: int) -> ImageChunk | None:
        """The image starting at token position `pos`, if one does."""
        return next((im for im in self.images if im.start == pos), None)

    def next_image(self, pos: int) -> int:
        """Where the first image at or after `pos` starts (the prompt's length if none does)."""
        return next((im.start for im in self.images if im.start >= pos), len(self.tokens))

    def close(self) -> None:
        if self._chunks:
            mt.mtmd_input_chunks_free(self._chunks)
            self._chunks = None


class Projector:
    """A loaded vision projector for one text model."""

    def __init__(self, path: str, model: Model, *, n_threads: int, use_gpu: bool) -> None:
        """Load the projector; raises `ModelFileError` when libmtmd cannot use the file."""
        if not os.path.isfile(path):
            raise ModelFileError(f"the vision projector {path} does not exist", param="mmproj_path")
        mt.mtmd_helper_log_set(_mtmd_log.callback, ctypes.c_void_p(0))
        params = mt.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = False
        self._ctx = mt.mtmd_init_from_file(os.fsencode(path), model.ptr, params)
        if not self._ctx:
            raise ModelFileError(
                f"libmtmd could not load the vision projector {path} for this model "
                "(wrong file, or made for another text model)",
                param="mmproj_path",
            )
        if not mt.mtmd_support_vision(self._ctx) or mt.mtmd_decode_use_mrope(self._ctx):
            why = "does not read images" if not mt.mtmd_support_vision(self._ctx) else "uses M-RoPE positions"
            self.close()
            raise ModelFileError(f"the projector {path} {why}, which Spark does not support", param="mmproj_path")
        marker = mt.mtmd_get_marker(self._ctx) or mt.mtmd_default_marker()
        self.marker = marker.decode()
        # libmtmd's context is not meant for two threads at once: tokenizing runs on a
        # caller's thread while the decode loop evaluates images.
        self._lock = threading.Lock()

    def tokenize(self, text: str, images: Sequence[ImagePart], *, add_special: bool) -> PromptMedia:
        """Split a rendered prompt holding one marker per image into tokens and image chunks.

        Raises `InvalidRequest` for an image that cannot be decoded, or when the
        template did not keep exactly one marker per image.
        """
        if text.count(self.marker) != len(images):
            raise InvalidRequest(
                f"the prompt has {text.count(self.marker)} image markers for {len(images)} images: "
                f"the chat template dropped an image, or a message contains the text {self.marker!r}",
                param="messages",
            )
        bitmaps: list[int] = []
        chunks = None
        try:
            with self._lock:
                for i, image in enumerate(images):
                    bitmaps.append(self._bitmap(image, i))
                chunks = mt.mtmd_input_chunks_init()
                if not chunks:
                    raise MemoryError("libmtmd could not allocate input chunks")
                data = text.encode()
                inp = mt.mtmd_input_text(text=data, text_len=len(data), add_special=add_special, parse_special=True)
                arr = (mt.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
                status = mt.mtmd_tokenize(self._ctx, chunks, ctypes.byref(inp), arr, len(bitmaps))
                if status != 0:
                    raise InvalidRequest(
                        f"the images could not be prepared for the model (libmtmd status {status})",
                        param="messages",
                    )
                media = self._flatten(chunks)
                chunks = None  # owned by `media` now
                return media
        finally:
            for bitmap in bitmaps:
                mt.mtmd_bitmap_free(bitmap)
            if chunks:
                mt.mtmd_input_chunks_free(chunks)

    def _bitmap(self, image: ImagePart, index: int) -> int:
        fmt = image_format(image.data)
        if fmt is None:
            raise InvalidRequest(
                f"image {index + 1} is not a PNG, JPEG, GIF, BMP or WebP image (declared as {image.media_type})",
                param="messages",
            )
        size = image_size(image.data)
        if size is not None and too_large(size):
            raise InvalidRequest(
                f"image {index + 1} ({fmt}, {size[0]}x{size[1]}) is larger than this server decodes "
                f"(at most {MAX_IMAGE_SIDE} pixels a side and {MAX_IMAGE_PIXELS // 1_000_000} megapixels)",
                param="messages",
            )
        buf = (ctypes.c_uint8 * len(image.data)).from_buffer_copy(image.data)
        wrapper = mt.mtmd_helper_bitmap_init_from_buf_wrapper(
            self._ctx, buf, len(image.data), False, mt.mtmd_helper_init_opt_default()
        )
        if wrapper.video_ctx:
            mt.mtmd_helper_video_free(wrapper.video_ctx)
        if not wrapper.bitmap:
            why = " (WebP needs ffmpeg on this server)" if fmt == "WebP" else ""
            raise InvalidRequest(f"image {index + 1} ({fmt}) could not be decoded{why}", param="messages")
        return int(wrapper.bitmap)

    def _flatten(self, chunks: int) -> PromptMedia:
        tokens: list[int] = []
        images: list[ImageChunk] = []
        for i in range(mt.mtmd_input_chunks_size(chunks)):
            chunk = mt.mtmd_input_chunks_get(chunks, i)
            kind = mt.mtmd_input_chunk_get_type(chunk)
            if kind == mt.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                ptr = mt.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                tokens += ptr[: n.value]
            elif kind == mt.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                n_tokens = mt.mtmd_input_chunk_get_n_tokens(chunk)
                images.append(ImageChunk(len(tokens), n_tokens, chunk))
                tokens += [IMAGE_TOKEN] * n_tokens
            else:
                mt.mtmd_input_chunks_free(chunks)
                raise InvalidRequest("only image input is supported, not audio", param="messages")
        return PromptMedia(tokens, images, chunks)

    def evaluate(self, ctx: Context, image: ImageChunk, *, seq: int, n_batch: int) -> None:
        """Encode an image and decode its embeddings into sequence `seq` at its position."""
        new_pos = ctypes.c_int32(0)  # llama_pos
        with self._lock:
            status = mt.mtmd_helper_eval_chunk_single(
                self._ctx, ctx.ptr, image.chunk, image.start, seq, n_batch, False, ctypes.byref(new_pos)
            )
        if status != 0:
            raise RunnerFailed(f"evaluating an image failed (libmtmd status {status})")

    def close(self) -> None:
        if self._ctx:
            mt.mtmd_free(self._ctx)
            self._ctx = None
