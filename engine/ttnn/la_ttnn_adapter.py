"""The TT-NN adapter: LocateAnything-3B on one Blackhole p150a chip, driven step by step
from the Go worker through engine/native/ttnn_backend.c.

VALIDATED ONLY ON HARDWARE. Nothing below the "device" line runs in this project's CI:
there is no chip there. CI proves the bridge and the protocol with la_ttnn_standin (same
protocol, numpy) and tests this module's pure parts (settings, knobs, the protocol
surface) in test_la_ttnn_adapter.py. The device calls follow the recipe the Tenstorrent
port validated (docs/background.md): a 1x1 mesh opened with a 50 MB trace region and one
command queue, tt_transformers' Qwen2 (ModelArgs with HF_MODEL = the extracted LLM dir,
precision preset `precision`, BFP8 weights, paged KV 32 x 1024 blocks), prefill of
host-merged embeddings padded by the qwen25_vl helper, greedy decode through the stock
Generator with trace replay (`trace`), MoonViT built once for the canonical grid
(`canon_grid`), and warm-up runs (`warmup_runs`) that compile every program and capture the
decode trace before open() returns. It implements the port's legacy graph (TT_FUSED=0); the
fused vision/prefill traces are not wired here.

Settings: every knob arrives in config["options"], the "key=value" lines the Go worker
builds from its configuration (package config), plus config["llm_dir"]. This module reads
no environment variable and states no default: the defaults live in the worker's
configuration only, and a missing knob is an error naming the option and the worker
variable it comes from (OPTION_VARIABLES).

Imports of ttnn, torch and tt-metal's models.* happen inside open(), so this module imports
anywhere (the worker checks the protocol surface at start-up; tests import it without
ttnn). On the host it needs PYTHONPATH to hold tt-metal's tree (models.tt_transformers,
models.demos.qwen25_vl) and the port's package (locate_anything.tt.model_la / .vision), and
the python_site option (LA_PYTHON_SITE) to name the tt-metal virtual environment's
site-packages.

Protocol (engine/native/ttnn_backend.c):
    open(config) -> handle; vision(handle, patches, grid_h, grid_w); prefill(handle, ids)
    -> int; decode(handle, token) -> int; reset(handle); close(handle); logits(handle)
"""

import dataclasses
import os
import sys
import time

PAGE_BLOCK_SIZE = 32
PAGE_MAX_BLOCKS = 1024
PRECISIONS = ("accuracy", "bfp8attn")

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
    max_seq_len: int
    image_token_id: int
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
        for key in ("weights_dir", "max_seq_len", "image_token_id", "vocab", "hidden", "merge_kernel"):
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
        max_seq_len = int(config["max_seq_len"])
        if max_seq_len > PAGE_BLOCK_SIZE * PAGE_MAX_BLOCKS:
            raise ValueError(f"max_seq_len {max_seq_len} exceeds the paged KV cache ({PAGE_BLOCK_SIZE * PAGE_MAX_BLOCKS})")
        device_id = options.get("device_id", "")
        if device_id and not device_id.isdigit():
            raise ValueError(f"TT_DEVICE_ID={device_id!r}: want a device number")
        return cls(
            weights_dir=str(config["weights_dir"]),
            llm_dir=str(llm_dir),
            grid=grid,
            max_seq_len=max_seq_len,
            image_token_id=int(config["image_token_id"]),
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


def warmup_prompt(settings, n_image, text_tokens=27):
    """A prompt shaped like a real detection prompt (the ~303-token bucket at 24x44)."""
    ids = [_IM_START, _SYSTEM, _NEWLINE, _IM_END, _NEWLINE, _IM_START, _USER, _NEWLINE, _IMG_START]
    ids += [settings.image_token_id] * n_image
    ids += [_IMG_END] + [_NEWLINE] * text_tokens + [_IM_END, _NEWLINE, _IM_START, _ASSISTANT, _NEWLINE]
    return ids


# ---------------------------------------------------------------------------------------
# device (validated only on hardware)
# ---------------------------------------------------------------------------------------


def _import_device_stack():
    """Imports ttnn, torch and the tt-metal / port modules, with one clear error if absent."""
    try:
        import ttnn  # first: on a host without it, fail before the slow torch import
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
    return dataclasses.make_dataclass("Stack", ["torch", "ttnn", "PagedAttentionConfig", "merge_vision_tokens",
                                                "preprocess_inputs_prefill", "Mode", "Generator", "DecodersPrecision",
                                                "MathFidelitySetting", "ModelArgs", "ModelOptimizations", "OpGroup",
                                                "LATransformer", "MoonViT"])(
        torch, ttnn, PagedAttentionConfig, merge_vision_tokens, preprocess_inputs_prefill, Mode, Generator,
        DecodersPrecision, MathFidelitySetting, ModelArgs, ModelOptimizations, OpGroup, LATransformer, MoonViT)


class _MergeConfig:
    """What qwen25_vl's merge_vision_tokens reads from an HF config."""

    def __init__(self, image_token_id):
        self.image_token_id = image_token_id


class Engine:
    """The model on one chip: LLM with paged KV, MoonViT for the canonical grid, the
    Generator's decode trace, and the per-request state (position, image, last logits)."""

    def __init__(self, settings):
        s = self.s = settings
        x = self.x = _import_device_stack()
        torch, ttnn = x.torch, x.ttnn
        # The adapter's one touch of the environment, a write: tt_transformers' ModelArgs
        # reads the checkpoint's location from os.environ["HF_MODEL"], so point that at the
        # extracted Qwen2 directory before ModelArgs exists. (The launcher's HF_MODEL names
        # the Hugging Face repo, which is not what ModelArgs must load.)
        os.environ["HF_MODEL"] = s.llm_dir

        log(f"Opening mesh device {s.mesh_shape}")
        kwargs = dict(trace_region_size=s.trace_region_size, num_command_queues=1,
                      dispatch_core_config=ttnn.DispatchCoreConfig())
        if s.device_ids:
            kwargs["physical_device_ids"] = list(s.device_ids)
        self.mesh = ttnn.open_mesh_device(mesh_shape=ttnn.MeshShape(*s.mesh_shape), **kwargs)
        try:
            self._build()
            self._warm_up()
        except BaseException:
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
        log(f"Loading weights: Qwen2.5-3B LLM from {s.llm_dir} ({s.precision}, max_seq_len {s.max_seq_len})")
        self.args = x.ModelArgs(self.mesh, instruct=False, max_batch_size=1, optimizations=self._optimizations,
                                max_seq_len=s.max_seq_len, cache_hf=True)
        state_dict = self.args.load_state_dict()
        self.paged = x.PagedAttentionConfig(block_size=PAGE_BLOCK_SIZE, max_num_blocks=PAGE_MAX_BLOCKS)
        # paged_attention_config selects the paged cache; use_paged_kv_cache stays False
        # (the stock Attention allocates layer_past only then).
        self.model = x.LATransformer(args=self.args, mesh_device=self.mesh, dtype=ttnn.bfloat8_b,
                                     state_dict=state_dict,
                                     weight_cache_path=self.args.weight_cache_path(ttnn.bfloat8_b),
                                     paged_attention_config=self.paged)
        del state_dict
        self.kv_cache = [layer.attention.layer_past for layer in self.model.layers]
        self.generator = x.Generator([self.model], [self.args], self.mesh)
        perm = torch.randperm(PAGE_MAX_BLOCKS)  # any virtual->physical block map works
        self.page_table = torch.argsort(perm).reshape(1, PAGE_MAX_BLOCKS)
        hf = self.args.cached_hf_model
        self.embed = hf.get_input_embeddings().weight.detach().clone()  # [vocab, hidden] bf16, host
        tok = self.args.tokenizer
        self.pad_id = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
        self.args.cached_hf_model = None
        del hf
        log(f"LLM ready in {time.perf_counter() - t0:.1f}s")

        t0 = time.perf_counter()
        log(f"Loading weights: MoonViT from {s.weights_dir} (grid {s.grid[0]}x{s.grid[1]})")
        self.vis = x.MoonViT(self.mesh, s.weights_dir, s.grid, dtype=ttnn.bfloat16, fused=self._legacy_vision())
        self.vis.state_dict = None
        log(f"MoonViT ready in {time.perf_counter() - t0:.1f}s")
        self.reset()

    @staticmethod
    def _legacy_vision():
        """The port's legacy vision graph (TT_FUSED=0): the one this adapter's host-side
        merge expects."""
        try:
            from locate_anything.tt.fused import FusedConfig
            return FusedConfig(enabled=False)
        except (ImportError, TypeError):
            return None

    def _warm_up(self):
        """Compile every program and capture the decode trace before ready (the upstream
        server's 'Warmup run i/n'); a failure here fails open(), there is no fallback."""
        s, torch = self.s, self.x.torch
        n = self.s.image_tokens()
        patches = torch.zeros(s.grid[0] * s.grid[1] * 3 * 14 * 14, dtype=torch.float32).numpy().tobytes()
        ids = warmup_prompt(s, n)
        for i in range(s.warmup_runs):
            t0 = time.perf_counter()
            self.vision(patches, s.grid[0], s.grid[1])
            tok = self.prefill(ids)
            for _ in range(s.warmup_decode_steps):
                tok = self.decode(tok)
            self.reset()
            log(f"Warmup run {i + 1}/{s.warmup_runs}: {time.perf_counter() - t0:.1f}s")
        log("Warmup complete")

    def reset(self):
        self.pos = 0
        self.steps = 0
        self.image = None
        self.last_logits = None

    def vision(self, patches, grid_h, grid_w):
        s, torch = self.s, self.x.torch
        if (grid_h, grid_w) != s.grid:
            raise ValueError(f"grid {grid_h}x{grid_w}: MoonViT is built for {s.grid[0]}x{s.grid[1]} "
                             "(option canon_grid must be the grid the host side resizes to)")
        n = grid_h * grid_w
        if len(patches) != n * 3 * 14 * 14 * 4:
            raise ValueError(f"{len(patches)} bytes of patches for a {grid_h}x{grid_w} grid")
        pixels = torch.frombuffer(bytearray(patches), dtype=torch.float32).reshape(n, 3, 14, 14)
        self.image = self.vis.forward(pixels).to(torch.float32)  # [n/4, hidden], host

    def prefill(self, ids):
        s, x = self.s, self.x
        torch, ttnn = x.torch, x.ttnn
        if not ids:
            raise ValueError("empty prompt")
        if len(ids) >= s.max_seq_len:
            raise ValueError(f"prompt of {len(ids)} tokens leaves no room in max_seq_len {s.max_seq_len}")
        input_ids = torch.tensor([ids], dtype=torch.int64)
        n_slots = int((input_ids == s.image_token_id).sum())
        have = 0 if self.image is None else int(self.image.shape[0])
        if n_slots != have:
            raise ValueError(f"prompt has {n_slots} image tokens but {have} image embeddings are kept")
        text = torch.nn.functional.embedding(input_ids, self.embed).to(torch.float32)
        embeds = text if have == 0 else x.merge_vision_tokens(input_ids, text, self.image, _MergeConfig(s.image_token_id))
        padded, decode_pos, _ = x.preprocess_inputs_prefill(
            [embeds[0]], self.args, torch.ones_like(input_ids), pad_embedding=self.embed[self.pad_id].to(torch.float32))
        last = len(ids) - 1
        self.model.switch_mode(x.Mode.PREFILL)
        emb, rot, page_table, _ = self.model.prepare_inputs_prefill_embeds(
            padded[0].unsqueeze(0).to(torch.float32), start_pos=0, page_table=self.page_table, last_token_idx=last)
        out = self.model.ttnn_prefill_forward(emb, rot_mats_global=rot, rot_mats_local=None, user_id=0,
                                              page_table=page_table, get_last_token=(last // 32) * 32,
                                              kv_cache=self.kv_cache)
        logits = self.model.process_output_prefill(out.cpu(), last_token_idx=last % 32)
        # Free the prefill tensors before decode allocates its circular buffers.
        ttnn.deallocate(out)
        ttnn.deallocate(emb)
        if page_table is not None:
            ttnn.deallocate(page_table)
        self.last_logits = logits[: s.vocab]
        self.pos = int(decode_pos[0])
        self.steps = 0
        return int(torch.argmax(self.last_logits).item())

    def decode(self, token):
        s, torch = self.s, self.x.torch
        if self.pos == 0:
            raise ValueError("decode before prefill")
        if self.pos >= s.max_seq_len:
            raise ValueError(f"sequence reached max_seq_len {s.max_seq_len}")
        if not 0 <= token < s.vocab:
            raise ValueError(f"token {token} outside the vocabulary of {s.vocab}")
        out, _ = self.generator.decode_forward(
            torch.tensor([[token]], dtype=torch.int64), torch.tensor([self.pos], dtype=torch.int64),
            page_table=self.page_table, kv_cache=[self.kv_cache], enable_trace=s.trace,
            reset_batch=(self.steps == 0))
        self.last_logits = out.reshape(-1)[: s.vocab]
        self.pos += 1
        self.steps += 1
        return int(torch.argmax(self.last_logits).item())

    def logits(self):
        if self.last_logits is None:
            return None
        return self.last_logits.to(self.x.torch.float32).numpy().astype("<f4").tobytes()

    def close(self):
        """Drop every device tensor, then close the mesh (as the upstream server's lifespan
        shutdown does)."""
        import gc

        for attr in ("generator", "vis", "kv_cache", "page_table", "model", "args", "embed", "image", "last_logits"):
            setattr(self, attr, None)
        gc.collect()
        mesh, self.mesh = getattr(self, "mesh", None), None
        if mesh is not None:
            self.x.ttnn.close_mesh_device(mesh)


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


def open(config):  # noqa: A001 - the protocol's name
    settings = Settings.from_config(config)
    settings.check_files()
    add_site_dirs(settings.python_site)
    return Engine(settings)


def vision(handle, patches, grid_h, grid_w):
    handle.vision(patches, grid_h, grid_w)


def prefill(handle, ids):
    return handle.prefill(ids)


def decode(handle, token):
    return handle.decode(token)


def reset(handle):
    handle.reset()


def close(handle):
    handle.close()


def logits(handle):
    return handle.logits()
