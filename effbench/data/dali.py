"""The `dali` loader for image files (Food-101, class folders): an NVIDIA DALI pipeline per split.

    fn.readers.file (this rank's shard; training reshuffled globally each epoch, seeded)
      -> fn.decoders.image (CPU: libjpeg-turbo; CUDA: "mixed", nvjpeg)
      -> fn.resize (shorter side to the recipe's base, linear, antialiased) -> fn.crop (central square)
      -> the --augment recipe (effbench.recipes): crop, flip, rotation or fn.random_resized_crop
      -> fn.crop_mirror_normalize (float32 CHW, the recipe's mean and std)

On the CPU the pipeline has no device (`device_id=None`) and its operators run in `--workers`
threads; on CUDA everything after the decode runs on the GPU. Batches come out as the other
loaders' (float32 NCHW normalized, int64 labels) on the training device.

Sharding as the other loaders: training shards hold floor or ceil(n / world_size) images, and every
rank yields (n // world_size) // batch_size batches per epoch (the count DistributedSampler with
drop_last gives), drawn from a stream that runs on across DALI's epochs; validation is read once per
epoch in contiguous shards, the last batch padded by the reader and the padding dropped by the
iterator (LastBatchPolicy.PARTIAL), so every image is counted exactly once over the ranks.

DALI stops on a file it cannot decode (the other loaders skip and count it): that is one line
naming the file and exit 2. CIFAR's arrays are not files: refused in config (use fast or torchvision).
See docs/dali.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from effbench.data.augment import stream_seed
from effbench.data.images import FileExamples
from effbench.data.loaders import LoaderOptions
from effbench.errors import EffbenchError
from effbench.recipes import RRC_TRIES, Recipe
from effbench.system.preflight import DALI_INSTALL

Batch = tuple[torch.Tensor, torch.Tensor]
READER = "Reader"
# DALI seeds are 32-bit signed in its pipeline and reader arguments
SEED_MOD = 2**31


def require_dali() -> Any:
    """The nvidia.dali module, or a one-line EffbenchError saying how to install it."""
    try:
        import nvidia.dali as dali
    except ImportError as e:
        raise EffbenchError(
            "--loader", f"dali needs NVIDIA DALI, which is not installed ({e}); {DALI_INSTALL}"
        ) from None
    return dali


def shard_bounds(n: int, shard_id: int, num_shards: int) -> tuple[int, int]:
    """[start, end) of a DALI reader's shard: n * shard_id // num_shards (dali/operators/reader/loader/loader.h)."""
    return n * shard_id // num_shards, n * (shard_id + 1) // num_shards


def _pipeline(
    ex: FileExamples, recipe: Recipe, opts: LoaderOptions, device: torch.device, *, train: bool, seed: int
) -> Any:
    from nvidia.dali import Pipeline, fn, types

    gpu = device.type == "cuda"
    pipe = Pipeline(
        batch_size=opts.batch_size,
        num_threads=max(1, opts.workers),  # DALI's CPU operators run in this many threads (no processes)
        device_id=(device.index or 0) if gpu else None,
        seed=seed % SEED_MOD,
        prefetch_queue_depth=2,
    )
    base, size = recipe.base, recipe.crop_size
    with pipe:
        encoded, labels = fn.readers.file(
            files=list(ex.paths),
            labels=[int(x) for x in ex.labels],
            shard_id=opts.rank,
            num_shards=opts.world_size,
            # training: one global permutation per epoch, the same on every rank, then sharded
            # (DistributedSampler's scheme); validation in order, each shard once, padded to a full batch
            shuffle_after_epoch=train,
            **({"shuffle_after_epoch_seed": opts.seed % SEED_MOD} if train else {}),
            stick_to_shard=not train,
            pad_last_batch=not train,
            name=READER,
        )
        images = fn.decoders.image(encoded, device="mixed" if gpu else "cpu", output_type=types.RGB)
        images = _base_square(images, fn.peek_image_shape(encoded), base)
        mirror: Any = 0
        if train and recipe.crop == "random":
            # integer offsets 0..base-size, uniform (RandomCrop.get_params): positions k / (base - size)
            room = base - size
            pos = [k / room for k in range(room + 1)] if room else [0.0]
            images = fn.crop(
                images,
                crop=(size, size),
                crop_pos_x=fn.random.uniform(values=pos),
                crop_pos_y=fn.random.uniform(values=pos),
                rounding="round",  # k / room * room is k to float rounding
            )
            if recipe.flip_p:
                images = fn.flip(images, horizontal=fn.random.coin_flip(probability=recipe.flip_p))
            if recipe.rotation_deg:  # on uint8 before normalising, nearest, zero fill: RandomRotation's defaults
                deg = recipe.rotation_deg
                images = fn.rotate(
                    images,
                    angle=fn.random.uniform(range=[-deg, deg]),
                    keep_size=True,
                    fill_value=0,
                    interp_type=types.INTERP_NN,
                )
        elif train and recipe.crop == "random-resized":
            assert recipe.rrc_scale is not None and recipe.rrc_ratio is not None
            images = fn.random_resized_crop(
                images,
                size=(recipe.image_size, recipe.image_size),
                random_area=list(recipe.rrc_scale),
                random_aspect_ratio=list(recipe.rrc_ratio),
                num_attempts=RRC_TRIES,
                interp_type=types.INTERP_LINEAR,
                antialias=True,
            )
            if recipe.flip_p:
                mirror = fn.random.coin_flip(probability=recipe.flip_p)
        elif recipe.crop in ("center", "random") or recipe.val_crop == "center":  # none, and validation
            pos = _center_pos(base - size)
            images = fn.crop(images, crop=(size, size), crop_pos_x=pos, crop_pos_y=pos, rounding="truncate")
        out = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="CHW",
            mean=[m * 255 for m in recipe.mean],
            std=[s * 255 for s in recipe.std],
            mirror=mirror,
        )
        pipe.set_outputs(out, labels)
    return pipe


def _center_pos(room: int) -> float:
    """crop_pos for CenterCrop's offset int(round(room / 2)) (Python rounds half to even) under DALI's
    truncating `rounding`: the offset plus a quarter pixel, relative to the room."""
    return (round(room / 2) + 0.25) / room if room else 0.0


def _base_square(images: Any, shape: Any, base: int) -> Any:
    """Shorter side to `base`, the longer to int(base * long / short) (torchvision's Resize, bilinear,
    antialiased), then the central base x base window at CenterCrop's offset. Sizes and offsets are
    computed per image from the encoded header, so DALI neither rounds the longer side nor keeps a
    fractional scale (subpixel_scale)."""
    from nvidia.dali import fn, types
    from nvidia.dali import math as dmath

    h, w = shape[0], shape[1]
    short = dmath.min(h, w)
    rw, rh = base * w // short, base * h // short
    images = fn.resize(
        images,
        resize_x=fn.cast(rw, dtype=types.FLOAT),
        resize_y=fn.cast(rh, dtype=types.FLOAT),
        interp_type=types.INTERP_LINEAR,
        antialias=True,
        subpixel_scale=False,
    )

    def pos(side: Any) -> Any:  # CenterCrop's int(round(room / 2)): halves round to even
        room = side - base
        half, odd = room // 2, room % 2
        offset = half + odd * (half % 2)
        # the offset plus a quarter pixel under truncation; room 0 (a square image) gives position 0
        return (fn.cast(offset, dtype=types.FLOAT) + 0.25) / fn.cast(dmath.max(room, 1), dtype=types.FLOAT)

    return fn.crop(images, crop=(base, base), crop_pos_x=pos(rw), crop_pos_y=pos(rh), rounding="truncate")


def decode_failure(err: Exception) -> EffbenchError:
    """DALI's multi-line error (it names the operator and the codec's failure, not the file) as one line."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    cause = next((ln for ln in lines if "failure" in ln.lower() or "unsupported" in ln.lower()), None)
    op = next((ln.split("`")[1] for ln in lines if ln.startswith("Error in") and "`" in ln), None)
    what = ", ".join(x for x in (op, cause) if x) or (lines[0][:200] if lines else type(err).__name__)
    return EffbenchError(
        "--loader",
        f"dali stopped on an image it cannot read or decode ({what}); DALI does not name the file: find it with "
        "--loader fast or torchvision, which skip, count and name unreadable files, or use one of them",
    )


class DaliBatches:
    """Re-iterable over a DALIGenericIterator: (float32 NCHW, int64) on the training device.

    Training yields exactly `steps` batches per pass from a stream that continues across DALI's
    epochs (an early break, --max-steps, resumes there next pass). Validation yields one DALI epoch
    of this rank's shard; a pass left early (--max-val-steps) rebuilds the pipeline, since a DALI
    iterator cannot be rewound mid-epoch, so every pass starts at the shard's first image."""

    def __init__(self, make_pipe: Callable[[], Any], device: torch.device, *, train: bool, steps: int) -> None:
        self.make_pipe = make_pipe
        self.device = device
        self.train = train
        self.steps = steps
        self.it = self._iterator()
        self.mid_epoch = False

    def _iterator(self) -> Any:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        try:
            pipe = self.make_pipe()
            pipe.build()
            return DALIGenericIterator(
                pipe,
                ["images", "labels"],
                reader_name=READER,
                last_batch_policy=LastBatchPolicy.DROP if self.train else LastBatchPolicy.PARTIAL,
                auto_reset=True,
            )
        except RuntimeError as e:
            raise decode_failure(e) from None

    def __len__(self) -> int:
        return self.steps

    def _convert(self, out: list[dict[str, torch.Tensor]]) -> Batch:
        d = out[0]
        images = d["images"]
        labels = d["labels"].reshape(-1).to(device=self.device, dtype=torch.int64, non_blocking=True)
        return (images if images.device == self.device else images.to(self.device)), labels

    def _next(self) -> Batch | None:
        try:
            batch = self._convert(next(self.it))
        except StopIteration:
            self.mid_epoch = False
            return None
        except RuntimeError as e:
            raise decode_failure(e) from None
        self.mid_epoch = True
        return batch

    def __iter__(self) -> Iterator[Batch]:
        if not self.train:
            if self.mid_epoch:  # the last pass stopped early: start again at the shard's first image
                del self.it
                self.it = self._iterator()
                self.mid_epoch = False
            while (batch := self._next()) is not None:
                # the iterator gives every shard the batches of the largest (the reader's padded epoch):
                # a shard one image shorter can end on a batch with no image in it
                if len(batch[1]):
                    yield batch
            return
        for _ in range(self.steps):
            batch = self._next()
            if batch is None:  # the end of a DALI epoch (auto_reset has rewound it): carry on
                batch = self._next()
            assert batch is not None, "a training shard holds at least one batch (checked in build_data)"
            yield batch


def build_loaders(
    train_ex: FileExamples, val_ex: FileExamples, opts: LoaderOptions, device: torch.device, recipe: Recipe
) -> tuple[DaliBatches, DaliBatches, Callable[[int], None], str]:
    """(train, val, set_epoch, steps) for one rank."""
    require_dali()
    assert recipe.kind == "files", "config refuses --loader dali on array datasets"
    per_rank = len(train_ex) // opts.world_size
    train_seed, val_seed = stream_seed(opts.seed, opts.rank, 0), stream_seed(opts.seed, opts.rank, 1)
    train = DaliBatches(
        lambda: _pipeline(train_ex, recipe, opts, device, train=True, seed=train_seed),
        device, train=True, steps=per_rank // opts.batch_size,
    )  # fmt: skip
    lo, hi = shard_bounds(len(val_ex), opts.rank, opts.world_size)
    val = DaliBatches(
        lambda: _pipeline(val_ex, recipe, opts, device, train=False, seed=val_seed),
        device, train=False, steps=-(-(hi - lo) // opts.batch_size),
    )  # fmt: skip

    def set_epoch(epoch: int) -> None:
        """DALI reshuffles by itself at each of its epochs (shuffle_after_epoch, seeded); nothing to do."""

    decode = "nvjpeg, mixed" if device.type == "cuda" else "CPU decoder"
    return train, val, set_epoch, recipe.steps() + f" (DALI {_version()}, {decode})"


def _version() -> str:
    import nvidia.dali as dali

    return str(dali.__version__)
