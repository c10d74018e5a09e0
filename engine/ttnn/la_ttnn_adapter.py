"""The TT-NN adapter: LocateAnything-3B on one Blackhole p150a chip, driven step by step
from the Go worker through engine/native/ttnn_backend.c.

VALIDATED ONLY ON HARDWARE. Nothing below the "device" line has run on a chip from this
project: there is no chip in CI. CI proves the bridge and the protocol with la_ttnn_standin
(same protocol, numpy) and tests this module in test_la_ttnn_adapter.py: its pure parts
(settings, knobs, page tables, the protocol surface) as they are, and its device code
against fakes of ttnn and the tt_transformers objects that check the calls it makes. The
device calls follow the recipe the Tenstorrent port validated at batch 1
(docs/background.md): a 1x1 mesh opened with a 50 MB trace region and one command queue,
tt_transformers' Qwen2 (ModelArgs with HF_MODEL = the extracted LLM dir, precision preset
`precision`, BFP8 weights, a paged KV pool of 1024 blocks of 32), prefill of host-merged
embeddings padded by the qwen25_vl helper, greedy decode through the stock Generator with
trace replay (`trace`), MoonViT built once for the canonical grid (`canon_grid`) in the
port's legacy graph (TT_FUSED=0), and warm-up runs (`warmup_runs`) that compile every
program and capture the decode trace before open() returns.

Batching (docs/ttnn-backend.md, "The batched step on the chip"): the protocol's max_batch
slots are the Generator's users. ModelArgs gets max_batch_size = max_batch; the KV pool is
split evenly, user u owning row u of the page table (PAGE_POOL_BLOCKS / max_batch blocks).
A step's prompt on a free slot runs one user into its own pages, the way the Generator's
paged prefill does (that user's page-table row, user_id 0), then resets the Generator's mode
so its next decode takes the prefill-to-decode path. An AR step is one Generator.decode_forward over all
max_batch users, a token and a position per user; users not in the call are padded with
token 0 at position -1, which tt-metal's paged cache update and decode attention skip (the
convention of tt_transformers' partial batches). Every decode call has max_batch rows, so
the trace the Generator captures on its first call, in the warm-up, is at the batch size.

Settings: every knob arrives in config["options"], the "key=value" lines the Go worker
builds from its configuration (package config), plus config["llm_dir"] and the open
config's max_seq_len and max_batch. This module reads no environment variable and states
no default: the defaults live in the worker's configuration only, and a missing knob is an
error naming the option and the worker variable it comes from (OPTION_VARIABLES). It writes
two, before the libraries read them: HF_MODEL (ModelArgs loads the checkpoint named there)
and TT_FUSED=0 (the port's MoonViT would otherwise build its fused graph).

Imports of ttnn, torch, numpy and tt-metal's models.* happen inside open(), so this module
imports anywhere (the worker checks the protocol surface at start-up; tests import it
without ttnn). On the host it needs PYTHONPATH to hold tt-metal's tree
(models.tt_transformers, models.demos.qwen25_vl) and the port's package
(locate_anything.tt.model_la / .vision), and the python_site option (LA_PYTHON_SITE) to
name the tt-metal virtual environment's site-packages.

Parallel box decoding (docs/ttnn-backend.md, "Hybrid steps on the chip"): step() runs a
slot's one-token rows through the decode path above (each pending token a decode step at
its position) and a slot's block as one masked prefill of the slot's whole committed
sequence (prompt with its image rows, then every generated token) followed by the block:
the committed rows causal, so their keys and values rewrite the slot's pages with what a
prefill gives them; the block at the next 32-row tile, at positions L'-1.., under the
step mask, its keys and values landing on the slot's unused pages beyond L' and
overwritten by later tokens before anything reads them. The masked prefill needs two
things of the port that stock tt_transformers lacks (explicit RoPE positions and an
attention mask in prefill); open() checks for them, and without them a block step fails
with a clear error while AR decoding works as before.

Protocol (engine/native/ttnn_backend.c):
    open(config) -> handle; vision(handle, patches, grid_h, grid_w);
    step(handle, slots, pending, blocks, no_output, k, watch) -> [(top_ids, top_probs, watch_probs)];
    release(handle, slot); reset(handle); close(handle); logits(handle, row)
step() is the decoder's one entry (la_backend.h's ABI 4): a step on a free slot is its
prefill, and a step whose every slot is live with one pending token and no block is AR
decoding, which runs as one traced decode call (the fast path); a block's rows see each
other causally when the checkpoint's text_config.causal_attn is set (config["block_causal"]).
"""

import dataclasses
import inspect
import os
import random
import sys
import time

PAGE_BLOCK_SIZE = 32
PAGE_POOL_BLOCKS = 1024  # the paged KV pool the port validated: 32768 positions in all
PRECISIONS = ("accuracy", "bfp8attn")

# A decode row of a user that is not in the call: tt-metal's paged cache update and decode
# attention skip a user whose position is -1; its token only has to be a valid id.
IDLE_TOKEN = 0
IDLE_POSITION = -1

# Limits of one step call (la_backend.h's LA_STEP_MAX_*).
STEP_MAX_ROWS = 16
STEP_MAX_K = 8
STEP_MAX_WATCH = 16
# Where the Tenstorrent kernel driver puts a node per chip (/dev/tenstorrent/0, ...).
DEVICE_DIR = "/dev/tenstorrent"
TILE = 32  # rows of a device tile: a block step's rows start on one, so one tile holds them

# The exit status when the device can be neither used nor closed (a trace capture may be
# open: closing the mesh then hangs). 70 is EX_SOFTWARE; the worker's supervisor restarts it.
EXIT_DEVICE_UNSAFE = 70

# The option keys this module reads from config["options"], each with the worker variable
# it comes from: error messages name the variable, since that is what an operator sets.
OPTION_VARIABLES = {
    "canon_grid": "LA_CANON_GRID",  # "HxW"; the worker's "native" is refused here
    "precision": "LA_PREC",
    "trace": "LA_TRACE",  # "1" or "0"
    "trace_region_size": "LA_TRACE_REGION_SIZE",
    "warmup_runs": "LA_WARMUP_RUNS",
    "warmup_decode_steps": "LA_WARMUP_DECODE_STEPS",
    "mesh_shape": "TT_MESH_SHAPE",
    "device_id": "TT_DEVICE_ID",  # may be empty: the default device
    "python_site": "LA_PYTHON_SITE",  # may be empty: no site directories to add
}

# Ids of the Qwen2 chat scaffolding, used only to shape the warm-up prompt like a real one
# (same length bucket, image tokens in the same place); the warm-up's output is discarded.
_IM_START, _IM_END, _NEWLINE = 151644, 151645, 198
_SYSTEM, _USER, _ASSISTANT = 8948, 872, 77091
_IMG_START, _IMG_END = 151666, 151667


def log(msg):
    """Progress lines go to stderr: stdout belongs to the Go worker."""
    print(f"la_ttnn_adapter: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# settings (pure Python, tested without a chip)
# ---------------------------------------------------------------------------------------


def parse_pair(text, what, seps=("x", ",")):
    """'24x44', '(1, 1)' or '1,1' -> (a, b) of positive ints; ValueError otherwise."""
    raw = str(text).strip()
    s = raw.lower().replace("(", "").replace(")", "").replace(" ", "")
    for sep in seps:
        parts = s.split(sep)
        if len(parts) == 2 and all(p.isdigit() and int(p) > 0 for p in parts):
            return int(parts[0]), int(parts[1])
    raise ValueError(f"{what} {raw!r}: want two positive integers like '24x44'")


def parse_options(text):
    """The "key=value" lines of config["options"] -> {key: value}, both stripped; blank
    lines are skipped. An empty value stays "" and means "not set"."""
    out = {}
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"option line {line!r}: want key=value")
        out[key.strip()] = value.strip()
    return out


def _required(options, key):
    """The value of a knob the worker always passes; ValueError naming it when absent."""
    value = options.get(key, "")
    if not value:
        raise ValueError(f"no {key} option: the worker passes {OPTION_VARIABLES[key]} as option {key}")
    return value


def _flag(options, key):
    name, v = OPTION_VARIABLES[key], _required(options, key).lower()
    if v in ("1", "true", "on"):
        return True
    if v in ("0", "false", "off"):
        return False
    raise ValueError(f"{name}={v!r}: want 1 or 0")


def _int(options, key, minimum):
    name, raw = OPTION_VARIABLES[key], _required(options, key)
    try:
        v = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: want an integer") from None
    if v < minimum:
        raise ValueError(f"{name}={v}: want at least {minimum}")
    return v


def _grid(options, merge_kernel):
    """canon_grid as (h, w): a fixed grid whose sides are multiples of the merge kernel."""
    raw = _required(options, "canon_grid")
    if raw.lower() == "native":
        raise ValueError("LA_CANON_GRID=native: the ttnn backend needs a fixed grid HxW (MoonViT is "
                         "built once, for one grid), e.g. 24x44")
    grid = parse_pair(raw, "LA_CANON_GRID")
    k = merge_kernel
    if grid[0] % k or grid[1] % k:
        raise ValueError(f"LA_CANON_GRID {grid[0]}x{grid[1]}: both sides must be multiples of the merge kernel {k}")
    return grid


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything open() needs: the Go side's config dict and the knobs of its options."""

    weights_dir: str  # the LocateAnything snapshot (MoonViT and mlp1 come from here)
    llm_dir: str  # the extracted Qwen2 directory (HF_MODEL)
    grid: tuple  # canonical vision grid (h, w) in 14-px patches
    max_seq_len: int  # positions per sequence (LA_MAX_SEQ_LEN)
    max_batch: int  # sequences decoded together, the Generator's users (LA_MAX_BATCH)
    image_token_id: int
    block_causal: bool  # text_config.causal_attn: a block's rows see each other causally
    vocab: int
    hidden: int
    precision: str
    trace: bool
    trace_region_size: int
    warmup_runs: int
    warmup_decode_steps: int
    mesh_shape: tuple
    device_ids: tuple  # physical ids for open_mesh_device; () = the default
    python_site: str  # ':'-separated site directories to add; "" = none

    @classmethod
    def from_config(cls, config):
        """Reads config (open()'s argument): the dimensions, weights_dir and llm_dir keys
        the bridge sets, and the knobs of config["options"]. ValueError on anything missing
        or malformed, naming the option and its worker variable."""
        for key in ("weights_dir", "max_seq_len", "max_batch", "image_token_id", "vocab", "hidden", "merge_kernel"):
            if key not in config:
                raise ValueError(f"config lacks {key!r}")
        options = parse_options(config.get("options", ""))
        llm_dir = config.get("llm_dir", "")
        if not llm_dir:
            raise ValueError("no llm_dir option: the worker passes the extracted LLM directory (LA_LLM_DIR, "
                             "or the one it extracts under TT_DIT_CACHE_DIR on first boot) as option llm_dir")
        grid = _grid(options, int(config["merge_kernel"]))
        precision = _required(options, "precision")
        if precision not in PRECISIONS:
            raise ValueError(f"LA_PREC={precision!r}: choose one of {PRECISIONS}")
        max_seq_len, max_batch = int(config["max_seq_len"]), int(config["max_batch"])
        check_page_pool(max_batch, max_seq_len)
        device_id = options.get("device_id", "")
        if device_id and not device_id.isdigit():
            raise ValueError(f"TT_DEVICE_ID={device_id!r}: want a device number")
        return cls(
            weights_dir=str(config["weights_dir"]),
            llm_dir=str(llm_dir),
            grid=grid,
            max_seq_len=max_seq_len,
            max_batch=max_batch,
            image_token_id=int(config["image_token_id"]),
            block_causal=bool(config.get("block_causal", 0)),
            vocab=int(config["vocab"]),
            hidden=int(config["hidden"]),
            precision=precision,
            trace=_flag(options, "trace"),
            trace_region_size=_int(options, "trace_region_size", 1),
            warmup_runs=_int(options, "warmup_runs", 1),
            warmup_decode_steps=_int(options, "warmup_decode_steps", 1),
            mesh_shape=parse_pair(_required(options, "mesh_shape"), "TT_MESH_SHAPE"),
            device_ids=(int(device_id),) if device_id else (),
            python_site=options.get("python_site", ""),
        )

    def check_files(self):
        """The directories open() reads must be there; say what to do when not."""
        if not os.path.isfile(os.path.join(self.llm_dir, "model.safetensors")) or \
                not os.path.isfile(os.path.join(self.llm_dir, "config.json")):
            raise FileNotFoundError(f"extracted LLM missing in {self.llm_dir}: run the first-boot extraction "
                                    "(engine/extract; the worker does it when LA_ENGINE=ttnn)")
        if not os.path.isfile(os.path.join(self.weights_dir, "config.json")):
            raise FileNotFoundError(f"no LocateAnything snapshot in {self.weights_dir}")
        if self.mesh_shape != (1, 1):
            raise ValueError(f"TT_MESH_SHAPE {self.mesh_shape}: this adapter drives one chip (1x1)")

    def image_tokens(self, k=2):
        return (self.grid[0] // k) * (self.grid[1] // k)


def check_page_pool(max_batch, max_seq_len):
    """Each of max_batch sequences owns PAGE_POOL_BLOCKS // max_batch blocks of the paged KV
    pool, which must hold max_seq_len positions. ValueError naming the worker's variables
    when they do not fit."""
    if max_batch < 1 or max_seq_len < 1:
        raise ValueError(f"LA_MAX_BATCH {max_batch} and LA_MAX_SEQ_LEN {max_seq_len} must be positive")
    per_user = PAGE_POOL_BLOCKS // max_batch * PAGE_BLOCK_SIZE
    if max_seq_len > per_user:
        raise ValueError(
            f"LA_MAX_SEQ_LEN {max_seq_len} exceeds the paged KV pool: {PAGE_POOL_BLOCKS} blocks of "
            f"{PAGE_BLOCK_SIZE} shared by LA_MAX_BATCH {max_batch} sequences hold {per_user} positions each; "
            "lower one of them (LA_MAX_BATCH x LA_MAX_SEQ_LEN <= "
            f"{PAGE_POOL_BLOCKS * PAGE_BLOCK_SIZE})")


def page_rows(max_batch, pool_blocks=PAGE_POOL_BLOCKS, seed=0):
    """The page table: row u lists the physical blocks of user u, pool_blocks // max_batch
    of them, no block in two rows. The blocks are shuffled (any virtual-to-physical map
    works, as the qwen25_vl demo's random one shows; a shuffled one keeps the indirection
    honest) with a fixed seed, so every run lays the pool out the same way."""
    blocks = list(range(pool_blocks))
    random.Random(seed).shuffle(blocks)
    per_user = pool_blocks // max_batch
    return [blocks[u * per_user:(u + 1) * per_user] for u in range(max_batch)]


def blocks_for(n, block_size=PAGE_BLOCK_SIZE):
    """Blocks that hold n positions."""
    return -(-n // block_size)


def warmup_prompt(settings, n_image, text_tokens=27):
    """A prompt shaped like a real detection prompt (the ~303-token bucket at 24x44)."""
    ids = [_IM_START, _SYSTEM, _NEWLINE, _IM_END, _NEWLINE, _IM_START, _USER, _NEWLINE, _IMG_START]
    ids += [settings.image_token_id] * n_image
    ids += [_IMG_END] + [_NEWLINE] * text_tokens + [_IM_END, _NEWLINE, _IM_START, _ASSISTANT, _NEWLINE]
    return ids


def check_step(s, live, pos, slots, pending, blocks, no_output, k, watch):
    """Refuses a step la_backend.h does not allow (the bridge has checked the same; this
    module is also called directly). s: Settings; live, pos: the slots' state."""
    n = len(slots)
    if not 1 <= n <= s.max_batch or len(pending) != n or len(blocks) != n or len(no_output) != n:
        raise ValueError(f"{n} slots, {len(pending)} pending lists, {len(blocks)} blocks and {len(no_output)} "
                         f"no_output flags: want 1..{s.max_batch} of each, as many")
    if len(set(slots)) != n:
        raise ValueError(f"slots {slots} repeat a slot")
    if not 1 <= k <= STEP_MAX_K or len(watch) > STEP_MAX_WATCH:
        raise ValueError(f"k {k} (1..{STEP_MAX_K}) and {len(watch)} watched ids (at most {STEP_MAX_WATCH})")
    image_slots = []
    for slot, p, b, quiet in zip(slots, pending, blocks, no_output):
        if not 0 <= slot < s.max_batch:
            raise ValueError(f"slot {slot} out of range 0..{s.max_batch - 1}")
        if not live[slot] and not p:
            raise ValueError(f"slot {slot} is free: a step on it is its prefill and needs its prompt pending")
        if len(p) > (STEP_MAX_ROWS if live[slot] else s.max_seq_len) or len(b) > STEP_MAX_ROWS or not (p or b):
            raise ValueError(f"slot {slot}: {len(p)} pending and {len(b)} block tokens, want at most {STEP_MAX_ROWS} "
                             "of each on a live slot (a prompt on a free one) and one or the other")
        if quiet and b:
            raise ValueError(f"slot {slot}: no_output with a block of {len(b)} (every block row is an output)")
        held = pos[slot] + len(p)
        if held > s.max_seq_len or held - 1 + len(b) > s.max_seq_len:
            raise ValueError(f"slot {slot} is full: {pos[slot]} positions, {len(p)} pending and a block of {len(b)}, "
                             f"max_seq_len {s.max_seq_len}")
        if (live[slot] and s.image_token_id in p) or s.image_token_id in b:
            raise ValueError(f"slot {slot}: the image-context id {s.image_token_id} in a live slot's pending ids or "
                             "a block, which only a free slot's prompt may hold (images come with a prefill)")
        if s.image_token_id in p:
            image_slots.append(slot)
    if len(image_slots) > 1:
        raise ValueError(f"slots {image_slots} hold image-context ids: at most one slot of a step may")
    for t in [t for p in pending for t in p] + [t for b in blocks for t in b] + list(watch):
        if not 0 <= t < s.vocab:
            raise ValueError(f"token {t} outside the vocabulary of {s.vocab}")


def block_layout(held, n_block, tile=TILE):
    """Where a block step puts its rows in the masked prefill of a slot holding held
    committed tokens: the committed rows at 0..held-1, filler rows up to the next tile
    boundary, the block's rows from there (one tile holds them all, since n_block <=
    STEP_MAX_ROWS < tile). Returns (start, positions): the block's first row and each row's
    RoPE position (committed: its own; filler: held - 1, never read; block row i: held - 1 + i)."""
    start = -(-held // tile) * tile
    positions = list(range(held)) + [held - 1] * (start - held) + [held - 1 + i for i in range(n_block)]
    return start, positions


def step_mask(np, held, start, n_block, n_rows, block_causal=False):
    """The masked prefill's attention mask, bool [n_rows, n_rows] (True: may read), for the
    layout of block_layout: committed rows causal; filler rows read only themselves (nobody
    reads them); block rows read every committed row but the last (block row 0 stands in
    for it, at its position) and the block: all of it both ways, or block row i rows 0..i
    when block_causal (the checkpoint's text_config.causal_attn); rows past the block (the
    prefill's padding) causal over the committed rows and themselves."""
    allowed = np.zeros((n_rows, n_rows), dtype=bool)
    allowed[:held, :held] = np.tril(np.ones((held, held), dtype=bool))
    for r in range(held, start):
        allowed[r, r] = True
    end = start + n_block
    allowed[start:end, :held - 1] = True
    allowed[start:end, start:end] = np.tril(np.ones((n_block, n_block), dtype=bool)) if block_causal else True
    for r in range(end, n_rows):
        allowed[r, :held] = True
        allowed[r, r] = True
    return allowed


def ranked(np, row, k, watch):
    """(top_ids, top_probs, watch_probs) of a float32 logits row: the float32 softmax over
    the vocabulary, its k largest probabilities, largest first with equal ones in ascending
    id order, and the probabilities of the watched ids (docs/hybrid-decoding.md)."""
    z = row.astype(np.float32)
    e = np.exp(z - z.max())
    probs = e / e.sum(dtype=np.float32)
    top = np.argsort(-probs, kind="stable")[:k]
    return [int(i) for i in top], [float(probs[i]) for i in top], [float(probs[i]) for i in watch]


def masked_prefill_support(model):
    """None when the port's model can run a masked prefill at explicit positions
    (prepare_inputs_prefill_embeds takes positions=, ttnn_prefill_forward takes attn_mask=),
    else what is missing."""
    missing = []
    for method, arg in (("prepare_inputs_prefill_embeds", "positions"), ("ttnn_prefill_forward", "attn_mask")):
        fn = getattr(model, method, None)
        try:
            params = inspect.signature(fn).parameters if fn else {}
        except (TypeError, ValueError):
            params = {}
        if arg not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            missing.append(f"{method}({arg}=...)")
    if not missing:
        return None
    return ("the LocateAnything port's model has no masked prefill (" + ", ".join(missing) + "): block steps of "
            "parallel box decoding need it (docs/ttnn-backend.md, \"Hybrid steps on the chip\"); AR decoding "
            "is unaffected")


# ---------------------------------------------------------------------------------------
# device (validated only on hardware)
# ---------------------------------------------------------------------------------------


def _import_device_stack():
    """Imports ttnn, torch, numpy and the tt-metal / port modules, with one clear error if
    absent. The tests hand Engine a stack of fakes with the same fields instead."""
    try:
        import ttnn  # first: on a host without it, fail before the slow torch import
        import numpy
        import torch
        from models.demos.qwen25_vl.tt.common import PagedAttentionConfig, merge_vision_tokens, preprocess_inputs_prefill
        from models.tt_transformers.tt.common import Mode
        from models.tt_transformers.tt.generator import Generator
        from models.tt_transformers.tt.model_config import (DecodersPrecision, MathFidelitySetting, ModelArgs,
                                                            ModelOptimizations, OpGroup)
        from locate_anything.tt.model_la import LATransformer
        from locate_anything.tt.vision import MoonViT
    except ImportError as e:
        raise RuntimeError(
            f"the TT-NN stack is not importable ({e}); la_ttnn_adapter runs only on a Tenstorrent host with "
            "tt-metal and the LocateAnything port on PYTHONPATH (tests use LA_TTNN_ADAPTER=la_ttnn_standin)") from e
    try:
        from locate_anything.tt.fused import FusedConfig
    except ImportError:
        FusedConfig = None  # a port from before the fused paths: its MoonViT takes no fused=
    return Stack(torch=torch, np=numpy, ttnn=ttnn, PagedAttentionConfig=PagedAttentionConfig,
                 merge_vision_tokens=merge_vision_tokens, preprocess_inputs_prefill=preprocess_inputs_prefill,
                 Mode=Mode, Generator=Generator, DecodersPrecision=DecodersPrecision,
                 MathFidelitySetting=MathFidelitySetting, ModelArgs=ModelArgs, ModelOptimizations=ModelOptimizations,
                 OpGroup=OpGroup, LATransformer=LATransformer, MoonViT=MoonViT, FusedConfig=FusedConfig)


@dataclasses.dataclass
class SlotHistory:
    """A live slot's committed ids and the image embeddings its prompt was given."""

    ids: list
    image: object  # host tensor [n, hidden], or None for a prompt without image tokens


@dataclasses.dataclass(frozen=True)
class Stack:
    """The libraries the device code calls, gathered in one place."""

    torch: object
    np: object
    ttnn: object
    PagedAttentionConfig: object
    merge_vision_tokens: object
    preprocess_inputs_prefill: object
    Mode: object
    Generator: object
    DecodersPrecision: object
    MathFidelitySetting: object
    ModelArgs: object
    ModelOptimizations: object
    OpGroup: object
    LATransformer: object
    MoonViT: object
    FusedConfig: object  # None when the port has no locate_anything.tt.fused


class _MergeConfig:
    """What qwen25_vl's merge_vision_tokens reads from an HF config."""

    def __init__(self, image_token_id):
        self.image_token_id = image_token_id


def legacy_vision_kwargs(FusedConfig):
    """Selects the port's legacy MoonViT graph (the one this adapter's host-side merge
    expects): TT_FUSED=0 in the environment, which every reader of the knob family sees,
    and fused=<a disabled FusedConfig> only when one could be built. A MoonViT without a
    fused parameter (older ports) gets no such argument."""
    os.environ["TT_FUSED"] = "0"
    if FusedConfig is None:
        return {}
    try:
        disabled = FusedConfig.disabled() if hasattr(FusedConfig, "disabled") else FusedConfig(enabled=False)
    except TypeError:
        return {}
    return {"fused": disabled}


def decode_trace_ids(generator):
    """The trace ids a tt_transformers Generator holds: trace_ids_decode ({sampling on
    device: {model: id}}) in current trees, trace_ids_text ({model: id}) in older ones, and
    trace_id_prefill ({key: id}) should anything have run the Generator's own prefill."""
    ids = []
    for attr in ("trace_ids_decode", "trace_ids_text", "trace_id_prefill"):
        for v in dict(getattr(generator, attr, None) or {}).values():
            if isinstance(v, dict):
                ids.extend(t for t in v.values() if t is not None)
            elif v is not None:
                ids.append(v)
    return ids


class Engine:
    """The model on one chip: the LLM with its paged KV pool split among max_batch users,
    MoonViT for the canonical grid, the Generator and its decode trace, and the state of
    each slot (live, position) and of the last step (logits rows)."""

    def __init__(self, settings, stack, exit_process=os._exit):
        s = self.s = settings
        x = self.x = stack
        self._exit_process = exit_process
        self.mesh = self.generator = None
        # True from the first traced decode call until it returns: if it raises, the
        # Generator may have begun a trace capture it never ended (see close).
        self.capture_may_be_open = False
        self.trace_captured = False
        self.reset()
        # The adapter's touches of the environment are writes: tt_transformers' ModelArgs
        # reads the checkpoint's location from os.environ["HF_MODEL"], so point that at the
        # extracted Qwen2 directory before ModelArgs exists. (The launcher's HF_MODEL names
        # the Hugging Face repo, which is not what ModelArgs must load.)
        os.environ["HF_MODEL"] = s.llm_dir

        ttnn = x.ttnn
        log(f"Opening mesh device {s.mesh_shape}")
        kwargs = dict(trace_region_size=s.trace_region_size, num_command_queues=1,
                      dispatch_core_config=ttnn.DispatchCoreConfig())
        if s.device_ids:
            kwargs["physical_device_ids"] = list(s.device_ids)
        self.mesh = ttnn.open_mesh_device(mesh_shape=ttnn.MeshShape(*s.mesh_shape), **kwargs)
        try:
            self._build()
            self._warm_up()
        except BaseException as e:
            log(f"open failed: {type(e).__name__}: {e}")
            self.close()
            raise

    def _optimizations(self, model_args):
        x = self.x
        if self.s.precision == "bfp8attn":
            hifi4 = x.MathFidelitySetting.HIFI4
            groups = (x.OpGroup.LI_QKV_DECODE, x.OpGroup.LI_QKV_PREFILL, x.OpGroup.SDPA_DECODE,
                      x.OpGroup.SDPA_PREFILL, x.OpGroup.LI_O_DECODE, x.OpGroup.LI_O_PREFILL)
            mo = x.ModelOptimizations({"OpFidelity": {g: hifi4 for g in groups}})
            return x.DecodersPrecision(model_args.n_layers, model_args.model_name, mo)
        return x.DecodersPrecision.accuracy(model_args.n_layers, model_args.model_name)

    def _build(self):
        s, x = self.s, self.x
        torch, ttnn = x.torch, x.ttnn
        t0 = time.perf_counter()
        log(f"Loading weights: Qwen2.5-3B LLM from {s.llm_dir} ({s.precision}, max_seq_len {s.max_seq_len}, "
            f"max_batch {s.max_batch})")
        self.args = x.ModelArgs(self.mesh, instruct=False, max_batch_size=s.max_batch,
                                optimizations=self._optimizations, max_seq_len=s.max_seq_len, cache_hf=True)
        # Logits rows are cut at the checkpoint's vocabulary (the device pads it): the
        # extracted LLM must have that vocabulary, or every token id would be off.
        if int(self.args.vocab_size) != s.vocab:
            raise ValueError(f"the extracted LLM in {s.llm_dir} has a vocabulary of {self.args.vocab_size}, the "
                             f"checkpoint {s.weights_dir} one of {s.vocab}: extract it again (LA_FORCE_EXTRACT=1)")
        # The prefill below is the model's one-pass prefill; tt_transformers runs a prompt
        # padded past max_prefill_chunk_size in chunks, which this adapter does not do.
        self.max_prefill = int(self.args.max_prefill_chunk_size)
        state_dict = self.args.load_state_dict()
        self.paged = x.PagedAttentionConfig(block_size=PAGE_BLOCK_SIZE, max_num_blocks=PAGE_POOL_BLOCKS)
        # paged_attention_config selects the paged cache; use_paged_kv_cache stays False
        # (the stock Attention allocates layer_past only then).
        self.model = x.LATransformer(args=self.args, mesh_device=self.mesh, dtype=ttnn.bfloat8_b,
                                     state_dict=state_dict,
                                     weight_cache_path=self.args.weight_cache_path(ttnn.bfloat8_b),
                                     paged_attention_config=self.paged)
        del state_dict
        self.kv_cache = [layer.attention.layer_past for layer in self.model.layers]
        self.block_support = masked_prefill_support(self.model)  # None: block steps can run
        if self.block_support:
            log(self.block_support)
        self.generator = x.Generator([self.model], [self.args], self.mesh)
        self.page_table = torch.tensor(page_rows(s.max_batch), dtype=torch.int32)  # [max_batch, blocks per user]
        hf = self.args.cached_hf_model
        self.embed = hf.get_input_embeddings().weight.detach().clone()  # [vocab, hidden] bf16, host
        tok = self.args.tokenizer
        self.pad_id = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
        self.args.cached_hf_model = None
        del hf
        log(f"LLM ready in {time.perf_counter() - t0:.1f}s")

        t0 = time.perf_counter()
        log(f"Loading weights: MoonViT from {s.weights_dir} (grid {s.grid[0]}x{s.grid[1]}, legacy graph)")
        self.vis = x.MoonViT(self.mesh, s.weights_dir, s.grid, dtype=ttnn.bfloat16,
                             **legacy_vision_kwargs(x.FusedConfig))
        self.vis.state_dict = None
        log(f"MoonViT ready in {time.perf_counter() - t0:.1f}s")

    def _warm_up(self):
        """Compile every program and capture the decode trace before ready (the upstream
        server's 'Warmup run i/n'): the warm-up prompt in every slot, decode steps with all
        of them (the first one captures the trace, at max_batch rows), then one step of a
        partial batch so the idle-row path has run too. A failure here fails open(); there
        is no fallback."""
        s = self.s
        slots = list(range(s.max_batch))
        patches = bytes(s.grid[0] * s.grid[1] * 3 * 14 * 14 * 4)  # float32 zeros
        ids = warmup_prompt(s, s.image_tokens())
        if len(ids) + s.warmup_decode_steps + 1 > s.max_seq_len:
            raise ValueError(f"the warm-up needs {len(ids) + s.warmup_decode_steps + 1} positions, "
                             f"LA_MAX_SEQ_LEN is {s.max_seq_len}")
        for i in range(s.warmup_runs):
            t0 = time.perf_counter()
            self.vision(patches, s.grid[0], s.grid[1])
            image = self.image
            tokens = []
            for slot in slots:
                self.image = image  # one vision result serves every slot's prefill
                tokens.append(self.step([slot], [ids], [[]], [False], 1, [])[0][0][0])
            for _ in range(s.warmup_decode_steps):
                rows = self.step(slots, [[t] for t in tokens], [[]] * len(slots), [False] * len(slots), 1, [])
                tokens = [r[0][0] for r in rows]
            if s.max_batch > 1:
                self.step(slots[:1], [tokens[:1]], [[]], [False], 1, [])
            if self.block_support is None:  # compile the masked prefill of a block step too
                self.step(slots[:1], [[]], [[tokens[0]] * 6], [False], 1, [])
            self.reset()
            log(f"Warmup run {i + 1}/{s.warmup_runs}: {time.perf_counter() - t0:.1f}s")
        log("Warmup complete")

    # --- per-request state ------------------------------------------------------------

    def reset(self):
        n = self.s.max_batch
        self.live = [False] * n
        self.pos = [0] * n  # positions each slot holds: prompt and decoded tokens
        # What each live slot holds, for a block step's masked prefill of the whole
        # sequence: its committed ids (prompt, then generated) and its image embeddings.
        self.history = [None] * n
        self.image = None
        self.last_logits = []  # numpy float32 [vocab] per row of the last step
        self.batch_changed = True  # a slot started or ended since the last decode

    def _usable(self):
        if self.capture_may_be_open:
            raise RuntimeError("the decode trace capture failed and may still be open: the device can be neither "
                               "used nor closed; the worker must restart")

    def _check_slot(self, slot):
        if not 0 <= slot < self.s.max_batch:
            raise ValueError(f"slot {slot} out of range 0..{self.s.max_batch - 1}")

    def release(self, slot):
        self._check_slot(slot)
        if self.live[slot]:
            self.batch_changed = True
        self.live[slot] = False
        self.pos[slot] = 0
        self.history[slot] = None

    def logits(self, row):
        if not 0 <= row < len(self.last_logits):
            return None
        return self.last_logits[row].astype("<f4").tobytes()

    # --- vision -------------------------------------------------------------------------

    def vision(self, patches, grid_h, grid_w):
        self._usable()
        s, torch = self.s, self.x.torch
        if (grid_h, grid_w) != s.grid:
            raise ValueError(f"grid {grid_h}x{grid_w}: MoonViT is built for {s.grid[0]}x{s.grid[1]} "
                             "(option canon_grid must be the grid the host side resizes to)")
        n = grid_h * grid_w
        if len(patches) != n * 3 * 14 * 14 * 4:
            raise ValueError(f"{len(patches)} bytes of patches for a {grid_h}x{grid_w} grid")
        pixels = torch.frombuffer(bytearray(patches), dtype=torch.float32).reshape(n, 3, 14, 14)
        self.image = self.vis.forward(pixels).to(torch.float32)  # [n/4, hidden], host

    # --- prefill: one user into its pages -----------------------------------------------

    def _prefill(self, slot, ids):
        """A step's prompt on a free slot (step() checked it): one user into its own pages.
        Returns the last row's logits."""
        s, x = self.s, self.x
        torch, ttnn = x.torch, x.ttnn
        # A prompt without image-context ids leaves the kept image for the one that has them
        # (step() checked that their count is the kept embeddings').
        image = self.image if s.image_token_id in ids else None
        have = 0 if image is None else int(image.shape[0])

        # Host side: text embeddings, the image rows merged in, padded to the prefill bucket.
        input_ids = torch.tensor([ids], dtype=torch.int64)
        text = torch.nn.functional.embedding(input_ids, self.embed).to(torch.float32)
        embeds = text if have == 0 else x.merge_vision_tokens(input_ids, text, image, _MergeConfig(s.image_token_id))
        padded, _, _ = x.preprocess_inputs_prefill(
            [embeds[0]], self.args, torch.ones_like(input_ids), pad_embedding=self.embed[self.pad_id].to(torch.float32))
        padded_len = int(padded[0].shape[0])
        if padded_len > self.max_prefill:
            raise ValueError(f"prompt of {len(ids)} tokens pads to {padded_len}, beyond the model's "
                             f"max_prefill_chunk_size {self.max_prefill}: this adapter does not run chunked prefill "
                             "(lower LA_IN_TOKEN_LIMIT or the grid)")

        # Device: the user's own pages, as the Generator's paged prefill passes them: the
        # first blocks of its page-table row that hold the prompt, as user 0 of a batch of 1.
        last = len(ids) - 1
        user_table = self.page_table[slot:slot + 1, :blocks_for(len(ids))]
        self.model.switch_mode(x.Mode.PREFILL)
        try:
            emb, rot, tt_table, _ = self.model.prepare_inputs_prefill_embeds(
                padded[0].unsqueeze(0).to(torch.float32), start_pos=0, page_table=user_table, last_token_idx=last)
            out = self.model.ttnn_prefill_forward(emb, rot_mats_global=rot, rot_mats_local=None, user_id=0,
                                                  page_table=tt_table, get_last_token=(last // 32) * 32,
                                                  kv_cache=self.kv_cache)
            logits = self.model.process_output_prefill(out.cpu(), last_token_idx=last % 32)
            # Free the prefill tensors before decode allocates its circular buffers.
            ttnn.deallocate(out)
            ttnn.deallocate(emb)
            if tt_table is not None:
                ttnn.deallocate(tt_table)
        finally:
            # The Generator's own prefill sets its mode to "prefill"; this one bypasses it,
            # so say the same, or its next decode would skip the prefill-to-decode path.
            if hasattr(self.generator, "mode"):
                self.generator.mode = "prefill"
        row = self._vocab_row(logits)

        self.live[slot], self.pos[slot] = True, len(ids)
        self.history[slot] = SlotHistory(ids=list(ids), image=image)
        if image is not None:
            self.image = None  # consumed: the next prompt needs its own vision call
        self.batch_changed = True
        return row

    def _vocab_row(self, logits):
        """A prefill's logits as float32 numpy [vocab]: the device pads the vocabulary, the
        padding is cut off here by index."""
        flat = logits.reshape(-1)
        if flat.shape[0] < self.s.vocab:
            raise RuntimeError(f"prefill gave {flat.shape[0]} logits for a vocabulary of {self.s.vocab}")
        return flat[: self.s.vocab].float().numpy().copy()

    # --- decode: every user, one step ---------------------------------------------------

    def _decode(self, slots, tokens):
        """One token for each of the live slots (step() checked them) in one Generator decode
        call: the traced AR decode. Returns each slot's logits row."""
        # One row per user: the call's slots at their positions, every other user idle.
        user_tokens = [IDLE_TOKEN] * self.s.max_batch
        positions = [IDLE_POSITION] * self.s.max_batch
        for slot, token in zip(slots, tokens):
            user_tokens[slot], positions[slot] = token, self.pos[slot]
        rows = self._decode_users(user_tokens, positions)
        for slot, token in zip(slots, tokens):
            self.pos[slot] += 1
            self.history[slot].ids.append(token)
        return [rows[slot] for slot in slots]

    # --- step: parallel box decoding ------------------------------------------------------

    def step(self, slots, pending, blocks, no_output, k, watch):
        """The protocol's one step (la_backend.h). When every slot is live with one pending
        token, no block and an output row (AR decoding), it is one traced Generator decode
        call (_decode), the fast path the port validated. Otherwise: a free slot's pending
        ids are its prompt (_prefill, one user into its pages); a live slot without a block
        appends its pending tokens through the decode path, one decode call per pending
        index for all such slots together; a slot with a block takes the pending tokens
        into its history and runs the block (_block_rows). Output rows as the protocol says:
        none for no_output, the last pending row's, or the block's."""
        self._usable()
        slots = [int(v) for v in slots]
        pending = [[int(t) for t in p] for p in pending]
        blocks = [[int(t) for t in b] for b in blocks]
        no_output = [bool(v) for v in no_output]
        watch, k = [int(t) for t in watch], int(k)
        check_step(self.s, self.live, self.pos, slots, pending, blocks, no_output, k, watch)
        np = self.x.np
        if all(self.live[s] and len(p) == 1 and not b and not q for s, p, b, q in zip(slots, pending, blocks, no_output)):
            self.last_logits = self._decode(slots, [p[0] for p in pending])
            return [ranked(np, r, k, watch) for r in self.last_logits]
        if self.block_support and any(blocks):
            raise RuntimeError(self.block_support)
        for slot, p, b in zip(slots, pending, blocks):
            held = self.pos[slot] + len(p)
            if b and block_layout(held, len(b))[0] + len(b) > len(self.page_table[slot]) * PAGE_BLOCK_SIZE:
                raise ValueError(f"slot {slot}: a block after {held} positions needs room to the next {TILE}-row tile "
                                 f"and {len(b)} more, beyond the slot's {len(self.page_table[slot]) * PAGE_BLOCK_SIZE} "
                                 "positions of the KV pool")
        image = [p for p in pending if self.s.image_token_id in p]
        have = 0 if self.image is None else int(self.image.shape[0])
        if image and image[0].count(self.s.image_token_id) != have:
            raise ValueError(f"prompt has {image[0].count(self.s.image_token_id)} image tokens but {have} image "
                             "embeddings are kept")
        out = {}
        for slot, p in zip(slots, pending):
            if not self.live[slot]:
                out[slot] = [self._prefill(slot, p)]
        one_token = [(slot, p) for slot, p, b in zip(slots, pending, blocks) if not b and slot not in out]
        for j in range(max((len(p) for _, p in one_token), default=0)):
            users = [(slot, p[j]) for slot, p in one_token if j < len(p)]
            for (slot, _), row in zip(users, self._decode([u for u, _ in users], [t for _, t in users])):
                out[slot] = [row]
        for slot, p, b in zip(slots, pending, blocks):
            if b:
                if slot in out:  # prefilled just now: the history holds the prompt
                    del out[slot]
                else:
                    self.history[slot].ids.extend(p)
                    self.pos[slot] += len(p)
                out[slot] = self._block_rows(slot, b)
        self.last_logits = [r for slot, q in zip(slots, no_output) if not q for r in out[slot]]
        return [ranked(np, r, k, watch) for r in self.last_logits]

    def _block_rows(self, slot, block):
        """The block's logits rows (float32 numpy [vocab] each): one masked prefill of the
        slot's committed sequence and the block (block_layout, step_mask) into the slot's
        own pages, on the path prefill uses, with the block's positions and the mask."""
        s, x = self.s, self.x
        torch = x.torch
        h = self.history[slot]
        held = len(h.ids)
        start, positions = block_layout(held, len(block))
        ids = h.ids + [self.pad_id] * (start - held) + list(block)
        input_ids = torch.tensor([ids], dtype=torch.int64)
        text = torch.nn.functional.embedding(input_ids, self.embed).to(torch.float32)
        embeds = text if h.image is None else x.merge_vision_tokens(input_ids, text, h.image, _MergeConfig(s.image_token_id))
        padded, _, _ = x.preprocess_inputs_prefill(
            [embeds[0]], self.args, torch.ones_like(input_ids), pad_embedding=self.embed[self.pad_id].to(torch.float32))
        n = int(padded[0].shape[0])
        if n > self.max_prefill:
            raise ValueError(f"a block after {held} positions pads to {n} rows, beyond the model's "
                             f"max_prefill_chunk_size {self.max_prefill}")
        positions = positions + list(range(len(positions), n))  # the padding rows: never read
        allowed = step_mask(x.np, held, start, len(block), n, s.block_causal)
        mask = torch.tensor(x.np.where(allowed, 0.0, float("-inf")).astype(x.np.float32)).reshape(1, 1, n, n)
        user_table = self.page_table[slot:slot + 1, :blocks_for(start + len(block))]
        self.model.switch_mode(x.Mode.PREFILL)
        try:
            emb, rot, tt_table, _ = self.model.prepare_inputs_prefill_embeds(
                padded[0].unsqueeze(0).to(torch.float32), start_pos=0, page_table=user_table, last_token_idx=start,
                positions=torch.tensor(positions, dtype=torch.int64))
            out = self.model.ttnn_prefill_forward(emb, rot_mats_global=rot, rot_mats_local=None, user_id=0,
                                                  page_table=tt_table, get_last_token=start, kv_cache=self.kv_cache,
                                                  attn_mask=mask)
            tile = out.cpu()  # the TILE rows from start: the block's first
            rows = [self._vocab_row(self.model.process_output_prefill(tile, last_token_idx=i)) for i in range(len(block))]
            x.ttnn.deallocate(out)
            x.ttnn.deallocate(emb)
            if tt_table is not None:
                x.ttnn.deallocate(tt_table)
        finally:
            if hasattr(self.generator, "mode"):
                self.generator.mode = "prefill"  # as after prefill: the next decode re-enters decode mode
        return rows

    def _decode_users(self, user_tokens, positions):
        """One Generator decode step over all max_batch users; the logits row of each user,
        float32 numpy [vocab], taken by index (user u is row u, the padding cut off)."""
        s, torch = self.s, self.x.torch
        capturing = s.trace and not self.trace_captured
        self.capture_may_be_open = capturing
        out = self.generator.decode_forward(
            torch.tensor([[t] for t in user_tokens], dtype=torch.int64),
            torch.tensor(positions, dtype=torch.int64),
            page_table=self.page_table, kv_cache=[self.kv_cache], enable_trace=s.trace,
            reset_batch=self.batch_changed)
        self.capture_may_be_open = False
        self.trace_captured = self.trace_captured or capturing
        self.batch_changed = False
        logits = out[0] if isinstance(out, tuple) else out  # (logits, log-probs) in current trees
        by_user = logits.reshape(logits.shape[0], -1)
        if by_user.shape[0] < s.max_batch or by_user.shape[1] < s.vocab:
            raise RuntimeError(f"decode gave logits of shape {tuple(logits.shape)} for {s.max_batch} users and a "
                               f"vocabulary of {s.vocab}")
        # Copies: the rows outlive this call (logits()), the Generator's buffers may not.
        return [by_user[u, : s.vocab].float().numpy().copy() for u in range(s.max_batch)]

    # --- close --------------------------------------------------------------------------

    def close(self):
        """Release the decode traces, drop every device tensor, then close the mesh (as the
        upstream server's lifespan shutdown does). If a trace capture may still be open,
        closing the mesh would hang: exit the process instead, after saying why."""
        import gc

        mesh, self.mesh = self.mesh, None
        if mesh is None:
            return
        if self.capture_may_be_open:
            log("a decode trace capture may still be open, and closing the device would hang: exiting the process "
                f"with status {EXIT_DEVICE_UNSAFE} instead (the worker's supervisor restarts it)")
            sys.stderr.flush()
            self._exit_process(EXIT_DEVICE_UNSAFE)
            return  # only a test's exit_process returns
        ttnn = self.x.ttnn
        if self.generator is not None:
            for trace_id in decode_trace_ids(self.generator):
                try:
                    ttnn.release_trace(mesh, trace_id)
                except Exception as e:  # noqa: BLE001 - the mesh must still be closed
                    log(f"releasing trace {trace_id}: {type(e).__name__}: {e}")
        for attr in ("generator", "vis", "kv_cache", "page_table", "model", "args", "embed", "image"):
            setattr(self, attr, None)
        self.last_logits = []
        gc.collect()
        ttnn.close_mesh_device(mesh)


# ---------------------------------------------------------------------------------------
# the protocol
# ---------------------------------------------------------------------------------------


def add_site_dirs(python_site):
    """Adds the ':'-separated python_site directories (LA_PYTHON_SITE) as site directories
    (their .pth files processed, so editable installs work): an embedded interpreter does
    not activate a virtual environment, so tt-metal's python_env site-packages must be
    named here."""
    import site

    added = []
    for d in filter(None, python_site.split(":")):
        if not os.path.isdir(d):
            raise FileNotFoundError(f"LA_PYTHON_SITE entry {d!r} is not a directory")
        if d not in sys.path:
            site.addsitedir(d)
            added.append(d)
    return added


def check_device(device_dir=None):
    """Fails in one line when the host has no Tenstorrent chip: no device node in
    device_dir (the kernel driver's /dev/tenstorrent). Checked before the extracted files
    and the slow imports, so LA_ENGINE=ttnn on a host without a chip says just that."""
    device_dir = device_dir or DEVICE_DIR
    try:
        nodes = [n for n in os.listdir(device_dir) if not n.startswith(".")]
    except OSError:
        nodes = []
    if not nodes:
        raise RuntimeError(f"no Blackhole device found: no device node in {device_dir}/ (the Tenstorrent kernel "
                           "driver makes one per chip; LA_ENGINE=cpu runs without a chip)")
    return nodes


def open(config):  # noqa: A001 - the protocol's name
    settings = Settings.from_config(config)
    check_device()
    settings.check_files()
    add_site_dirs(settings.python_site)
    return Engine(settings, _import_device_stack())


def vision(handle, patches, grid_h, grid_w):
    handle.vision(patches, grid_h, grid_w)


def release(handle, slot):
    handle.release(slot)


def reset(handle):
    handle.reset()


def close(handle):
    handle.close()


def step(handle, slots, pending, blocks, no_output, k, watch):
    return handle.step(slots, pending, blocks, no_output, k, watch)


def logits(handle, row):
    return handle.logits(row)
