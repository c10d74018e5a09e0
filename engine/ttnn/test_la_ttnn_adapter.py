"""Tests of the TT-NN adapter without a chip: settings from the option lines (never from
the environment), the file checks, the page table, the warm-up prompt, the protocol
surface, a clear error from open() where ttnn is missing, and the device code driven
against fakes of ttnn and the tt_transformers objects (fake_stack below) that check the
calls it makes: a page-table row and a position per user, the decode trace captured at the
batch size and released before the mesh closes, TT_FUSED=0 before MoonViT is built, the
refusal of prompts past max_prefill_chunk_size, the vocabulary check, the Generator's
mode reset after a prefill; and the block step of parallel box decoding (its layout, mask
and positions, one-token rows on the decode path, the clear error of a port without a
masked prefill).
Run: cd engine/ttnn && /usr/bin/python3 -m unittest -v (engine/native's Go tests run them too).
Needs only Debian's python3-numpy; the fakes stand in for torch too."""

import os
import tempfile
import types
import unittest
from unittest import mock

import numpy as np

import la_ttnn_adapter as A

CONFIG = {"weights_dir": "/snap", "max_seq_len": 4096, "max_batch": 8, "image_token_id": 151665, "vocab": 152681,
          "hidden": 2048, "merge_kernel": 2, "llm_dir": "/llm"}

# The option lines the Go worker passes, at its configuration's defaults (package config),
# with the grid the pipeline adds.
OPTIONS = {"python_lib": "", "adapter": "la_ttnn_adapter", "path": "", "python_site": "", "llm_dir": "/llm",
           "canon_grid": "24x44", "precision": "accuracy", "trace": "1", "trace_region_size": "50000000",
           "warmup_runs": "2", "warmup_decode_steps": "4", "mesh_shape": "1x1", "device_id": ""}

# Every knob the adapter cannot do without, with the worker variable it comes from.
REQUIRED = {"canon_grid": "LA_CANON_GRID", "precision": "LA_PREC", "trace": "LA_TRACE",
            "trace_region_size": "LA_TRACE_REGION_SIZE", "warmup_runs": "LA_WARMUP_RUNS",
            "warmup_decode_steps": "LA_WARMUP_DECODE_STEPS", "mesh_shape": "TT_MESH_SHAPE"}


def option_lines(options):
    """options as native.Open writes them: sorted "key=value" lines."""
    return "".join(f"{k}={v}\n" for k, v in sorted(options.items()))


def config(options=None, drop=(), **keys):
    """CONFIG as the bridge hands it to open(): OPTIONS updated by options, less the keys in
    drop, as config["options"]; keys override the config's own entries."""
    o = dict(OPTIONS, **(options or {}))
    for k in drop:
        o.pop(k)
    return dict(CONFIG, options=option_lines(o), **keys)


class SettingsTest(unittest.TestCase):
    def test_worker_defaults_are_the_validated_recipe(self):
        s = A.Settings.from_config(config())
        self.assertEqual(s.llm_dir, "/llm")
        self.assertEqual((s.max_seq_len, s.max_batch), (4096, 8))
        self.assertEqual(s.grid, (24, 44))
        self.assertEqual(s.image_tokens(), 264)
        self.assertEqual((s.precision, s.trace, s.trace_region_size), ("accuracy", True, 50_000_000))
        self.assertEqual((s.warmup_runs, s.warmup_decode_steps), (2, 4))
        self.assertEqual((s.mesh_shape, s.device_ids, s.python_site), ((1, 1), (), ""))

    def test_llm_dir_comes_from_the_config(self):
        self.assertEqual(A.Settings.from_config(config(llm_dir="/given")).llm_dir, "/given")
        with self.assertRaisesRegex(ValueError, "no llm_dir option: .*LA_LLM_DIR"):
            A.Settings.from_config(config(llm_dir=""))

    def test_knobs(self):
        options = {"canon_grid": "(16, 28)", "precision": "bfp8attn", "trace": "0", "trace_region_size": "160000000",
                   "warmup_runs": "1", "warmup_decode_steps": "7", "mesh_shape": "1,1", "device_id": "3",
                   "python_site": "/site/a:/site/b"}
        s = A.Settings.from_config(config(options))
        self.assertEqual((s.grid, s.precision, s.trace, s.trace_region_size, s.warmup_runs, s.warmup_decode_steps,
                          s.device_ids, s.python_site),
                         ((16, 28), "bfp8attn", False, 160_000_000, 1, 7, (3,), "/site/a:/site/b"))

    def test_bad_knobs_say_which(self):
        cases = {
            "precision": ("fast", "LA_PREC='fast': choose one of"),
            "trace": ("maybe", "LA_TRACE"),
            "canon_grid": ("25x44", "multiples of the merge kernel"),
            "mesh_shape": ("one", "TT_MESH_SHAPE"),
            "warmup_runs": ("0", "LA_WARMUP_RUNS"),
            "warmup_decode_steps": ("two", "LA_WARMUP_DECODE_STEPS"),
            "trace_region_size": ("big", "LA_TRACE_REGION_SIZE"),
            "device_id": ("a", "TT_DEVICE_ID"),
        }
        for key, (value, want) in cases.items():
            with self.subTest(key=key), self.assertRaisesRegex(ValueError, want):
                A.Settings.from_config(config({key: value}))
        with self.assertRaisesRegex(ValueError, "paged KV"):
            A.Settings.from_config(config(max_seq_len=40000, max_batch=1))
        with self.assertRaisesRegex(ValueError, "LA_MAX_SEQ_LEN 4097 exceeds the paged KV pool: .* LA_MAX_BATCH 8 "
                                                "sequences hold 4096 positions each"):
            A.Settings.from_config(config(max_seq_len=4097))
        self.assertEqual(A.Settings.from_config(config(max_seq_len=8192, max_batch=4)).max_batch, 4)
        with self.assertRaisesRegex(ValueError, "config lacks 'max_batch'"):
            A.Settings.from_config({k: v for k, v in config().items() if k != "max_batch"})
        with self.assertRaisesRegex(ValueError, "config lacks 'vocab'"):
            A.Settings.from_config({k: v for k, v in config().items() if k != "vocab"})

    def test_missing_required_option_is_a_clear_error(self):
        for key, variable in REQUIRED.items():
            want = f"no {key} option: the worker passes {variable} as option {key}"
            with self.subTest(key=key, missing="line"), self.assertRaisesRegex(ValueError, want):
                A.Settings.from_config(config(drop=[key]))
            with self.subTest(key=key, missing="value"), self.assertRaisesRegex(ValueError, want):
                A.Settings.from_config(config({key: ""}))
        with self.assertRaisesRegex(ValueError, "no canon_grid option"):
            A.Settings.from_config({k: v for k, v in config().items() if k != "options"})

    def test_native_grid_is_refused(self):
        for value in ("native", "NATIVE"):
            with self.subTest(value=value), self.assertRaisesRegex(
                    ValueError, "LA_CANON_GRID=native: the ttnn backend needs a fixed grid HxW"):
                A.Settings.from_config(config({"canon_grid": value}))

    def test_environment_is_ignored(self):
        bogus = {"LA_CANON_GRID": "native", "LA_PREC": "fast", "LA_TRACE": "maybe", "LA_WARMUP_RUNS": "0",
                 "TT_MESH_SHAPE": "8x4", "TT_DEVICE_ID": "x", "LA_LLM_DIR": "/env/llm", "TT_DIT_CACHE_DIR": "/env",
                 "LA_PYTHON_SITE": "/no/such/site"}
        with mock.patch.dict(os.environ, bogus):
            s = A.Settings.from_config(config())
            self.assertEqual((s.grid, s.precision, s.trace, s.warmup_runs, s.mesh_shape, s.device_ids, s.llm_dir,
                              s.python_site), ((24, 44), "accuracy", True, 2, (1, 1), (), "/llm", ""))
            # Nor does the environment stand in for a missing option.
            with self.assertRaisesRegex(ValueError, "no precision option"):
                A.Settings.from_config(config(drop=["precision"]))

    def test_parse_options(self):
        self.assertEqual(A.parse_options("a=1\n\nb = x=y \nc=\n"), {"a": "1", "b": "x=y", "c": ""})
        self.assertEqual(A.parse_options(""), {})
        self.assertEqual(A.parse_options(None), {})
        with self.assertRaisesRegex(ValueError, "option line 'oops': want key=value"):
            A.parse_options("a=1\noops\n")

    def test_parse_pair(self):
        for text in ("24x44", "24X44", "(24, 44)", "24,44"):
            self.assertEqual(A.parse_pair(text, "grid"), (24, 44))
        for text in ("24", "0x4", "axb", "1x2x3", ""):
            with self.subTest(text=text), self.assertRaises(ValueError):
                A.parse_pair(text, "grid")


class FilesAndOpenTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.snap = os.path.join(self.tmp.name, "snap")
        self.llm = os.path.join(self.tmp.name, "llm")
        os.makedirs(self.snap)
        os.makedirs(self.llm)
        open(os.path.join(self.snap, "config.json"), "w").close()

    def config(self, **options):
        return config(dict(options, llm_dir=self.llm), weights_dir=self.snap, llm_dir=self.llm)

    def settings(self, **options):
        return A.Settings.from_config(self.config(**options))

    def test_missing_extraction_says_what_to_do(self):
        with self.assertRaisesRegex(FileNotFoundError, "first-boot extraction"):
            self.settings().check_files()

    def test_more_than_one_chip_is_refused(self):
        for f in ("model.safetensors", "config.json"):
            open(os.path.join(self.llm, f), "w").close()
        self.settings().check_files()
        with self.assertRaisesRegex(ValueError, "one chip"):
            self.settings(mesh_shape="1x2").check_files()

    def device_dir(self, *nodes):
        """A stand-in for /dev/tenstorrent holding the given nodes, patched in for the test."""
        d = os.path.join(self.tmp.name, "dev-tenstorrent")
        os.makedirs(d, exist_ok=True)
        for n in nodes:
            open(os.path.join(d, n), "w").close()
        patcher = mock.patch.object(A, "DEVICE_DIR", d)
        patcher.start()
        self.addCleanup(patcher.stop)
        return d

    def test_open_without_ttnn_is_a_clear_error(self):
        self.device_dir("0")
        for f in ("model.safetensors", "config.json"):
            open(os.path.join(self.llm, f), "w").close()
        with self.assertRaisesRegex(RuntimeError, "TT-NN stack is not importable"):
            A.open(self.config())

    def test_open_without_a_chip_says_so_in_one_line(self):
        # Before the extracted files and the imports: a host without a chip fails on that.
        for d in (self.device_dir(), os.path.join(self.tmp.name, "absent")):
            with mock.patch.object(A, "DEVICE_DIR", d):
                with self.assertRaises(RuntimeError) as cm:
                    A.open(self.config())
                msg = str(cm.exception)
                self.assertTrue(msg.startswith("no Blackhole device found: no device node in " + d + "/"), msg)
                self.assertNotIn("\n", msg)
        self.device_dir("0")
        self.assertEqual(A.check_device(), ["0"])

    def test_open_checks_settings_first(self):
        with self.assertRaisesRegex(ValueError, "LA_CANON_GRID=native"):
            A.open(self.config(canon_grid="native"))


class SiteDirsTest(unittest.TestCase):
    def test_site_dirs_process_pth_files(self):
        with tempfile.TemporaryDirectory() as site_dir, tempfile.TemporaryDirectory() as extra:
            with open(os.path.join(extra, "la_site_probe.py"), "w") as f:
                f.write("VALUE = 42\n")
            with open(os.path.join(site_dir, "probe.pth"), "w") as f:
                f.write(extra + "\n")
            saved = list(A.sys.path)
            try:
                python_site = A.Settings.from_config(config({"python_site": site_dir})).python_site
                self.assertEqual(A.add_site_dirs(python_site), [site_dir])
                import la_site_probe
                self.assertEqual(la_site_probe.VALUE, 42)
            finally:
                A.sys.path[:] = saved
                A.sys.modules.pop("la_site_probe", None)
        with self.assertRaisesRegex(FileNotFoundError, "LA_PYTHON_SITE"):
            A.add_site_dirs("/no/such/site")
        self.assertEqual(A.add_site_dirs(""), [])


class PageTableTest(unittest.TestCase):
    def test_rows_split_the_pool(self):
        for batch in (1, 3, 8, 32):
            rows = A.page_rows(batch)
            self.assertEqual(len(rows), batch)
            self.assertTrue(all(len(r) == A.PAGE_POOL_BLOCKS // batch for r in rows))
            flat = [b for r in rows for b in r]
            self.assertEqual(len(set(flat)), len(flat), "a block in two rows")
            self.assertTrue(all(0 <= b < A.PAGE_POOL_BLOCKS for b in flat))
        self.assertEqual(A.page_rows(4), A.page_rows(4), "the layout is fixed")
        self.assertNotEqual(A.page_rows(1)[0], list(range(A.PAGE_POOL_BLOCKS)), "the blocks are shuffled")

    def test_blocks_for(self):
        self.assertEqual([A.blocks_for(n) for n in (1, 32, 33, 303)], [1, 1, 2, 10])


class ProtocolTest(unittest.TestCase):
    def test_surface(self):
        for name in ("open", "vision", "step", "release", "reset", "close", "logits"):
            self.assertTrue(callable(getattr(A, name)), name)

    def test_warmup_prompt_is_shaped_like_a_request(self):
        s = A.Settings.from_config(config())
        ids = A.warmup_prompt(s, s.image_tokens())
        self.assertEqual(ids.count(151665), 264)
        self.assertTrue(256 < len(ids) <= 512, len(ids))  # the 512-token prefill bucket, like a real prompt
        self.assertTrue(all(0 <= i < s.vocab for i in ids))

    def test_steps_delegate_to_the_handle(self):
        calls = []

        class Handle:
            def __getattr__(self, name):
                return lambda *a: calls.append((name, a)) or 7

        h = Handle()
        A.vision(h, b"p", 2, 4)
        self.assertEqual(A.step(h, [0], [[3]], [[]], [False], 2, [5]), 7)
        self.assertFalse(hasattr(A, "prefill") or hasattr(A, "decode"), "one step, no prefill or decode")
        A.release(h, 1)
        self.assertEqual(A.logits(h, 0), 7)
        A.reset(h)
        A.close(h)
        self.assertEqual(calls, [("vision", (b"p", 2, 4)), ("step", ([0], [[3]], [[]], [False], 2, [5])),
                                 ("release", (1,)), ("logits", (0,)),
                                 ("reset", ()), ("close", ())])

# ---------------------------------------------------------------------------------------
# fakes of the device stack
# ---------------------------------------------------------------------------------------
#
# A fake chip: the KV pool holds, per physical block, the "content" of each position (the
# first component of its embedding: a token id, an image row's marker, the pad id). A
# position's logits peak at score(the user's sequence read back through its page-table
# row), so a wrong page table, position or row shows up as a wrong token. The device pads
# the vocabulary; its padding columns hold the largest logits, so a row not cut at the
# vocabulary by index picks a padding id.

VOCAB = CONFIG["vocab"]
PADDED_VOCAB = 152704
HIDDEN = 4
IMAGE_MARK = 200000  # image embedding row i has first component IMAGE_MARK + i


def step(engine, slots, pending, blocks, k, watch):
    """A step with an output row for every slot."""
    return A.step(engine, slots, pending, blocks, [False] * len(slots), k, watch)


def prefill(engine, slot, ids, want_prob):
    """A prompt into the free slot through step: (greedy token, its probability or None)."""
    (ids_, probs, _), = step(engine, [slot], [ids], [[]], 1, [])
    return ids_[0], (probs[0] if want_prob else None)


def decode(engine, slots, tokens, want_prob):
    """One token per live slot through step: (greedy next tokens, their probabilities or None)."""
    rows = step(engine, slots, [[t] for t in tokens], [[]] * len(slots), 1, [])
    return [r[0][0] for r in rows], ([r[1][0] for r in rows] if want_prob else None)


class T(np.ndarray):
    """A numpy array with the few torch.Tensor methods the adapter calls."""

    def to(self, dtype):
        return np.asarray(self, dtype=dtype).view(T)

    def float(self):
        return self.to(np.float32)

    def numpy(self):
        return np.asarray(self)

    def unsqueeze(self, dim):
        return np.expand_dims(self, dim).view(T)

    def clone(self):
        return self.copy()

    def detach(self):
        return self


def t(a, dtype=None):
    return np.array(a, dtype=dtype).view(T)


fake_torch = types.SimpleNamespace(
    int64=np.int64, int32=np.int32, float32=np.float32,
    tensor=t,
    ones_like=lambda x: t(np.ones_like(x)),
    frombuffer=lambda buf, dtype: t(np.frombuffer(bytes(buf), dtype=dtype)),
    nn=types.SimpleNamespace(functional=types.SimpleNamespace(embedding=lambda ids, w: t(np.asarray(w)[np.asarray(ids)]))),
)


def score(seq):
    """The fake model's next token after the contents seq (position-weighted, mod vocab)."""
    return sum((i + 1) * int(v) for i, v in enumerate(seq)) % VOCAB


def logits_row(peak):
    row = np.zeros(PADDED_VOCAB, np.float32)
    row[peak] = 10.0
    row[VOCAB:] = 50.0  # the device's vocabulary padding
    return row


class Device:
    """What the device tensors of the fakes wrap."""

    def __init__(self, value):
        self.value = value

    def cpu(self):
        return self.value


class Chip:
    """The fake chip's state and the log of what was done to it, in order."""

    def __init__(self, vocab_size=VOCAB, max_prefill_chunk_size=1024, fail_capture=False):
        self.vocab_size, self.max_prefill_chunk_size, self.fail_capture = vocab_size, max_prefill_chunk_size, fail_capture
        self.events = []
        self.blocks = {}  # physical block -> contents of its 32 positions
        self.next_trace = 100

    def write(self, table_row, pos, value):
        self.blocks.setdefault(int(table_row[pos // A.PAGE_BLOCK_SIZE]), [None] * A.PAGE_BLOCK_SIZE)[
            pos % A.PAGE_BLOCK_SIZE] = value

    def read(self, table_row, n):
        return [self.blocks[int(table_row[p // A.PAGE_BLOCK_SIZE])][p % A.PAGE_BLOCK_SIZE] for p in range(n)]


def fake_stack(chip, fused=True, masked=False):
    """A Stack of fakes over chip. fused: the port has locate_anything.tt.fused; masked:
    its model runs a masked prefill at explicit positions (block steps)."""

    class ttnn:
        bfloat8_b, bfloat16 = "bfloat8_b", "bfloat16"

        @staticmethod
        def MeshShape(*shape):
            return shape

        @staticmethod
        def DispatchCoreConfig():
            return "dispatch"

        @staticmethod
        def open_mesh_device(mesh_shape, **kwargs):
            chip.events.append(("open_mesh_device", mesh_shape, kwargs["trace_region_size"]))
            return "mesh"

        @staticmethod
        def close_mesh_device(mesh):
            chip.events.append(("close_mesh_device", mesh))

        @staticmethod
        def begin_trace_capture(mesh, cq_id):
            chip.next_trace += 1
            chip.events.append(("begin_trace_capture", chip.next_trace))
            return chip.next_trace

        @staticmethod
        def end_trace_capture(mesh, trace_id, cq_id):
            chip.events.append(("end_trace_capture", trace_id))

        @staticmethod
        def release_trace(mesh, trace_id):
            chip.events.append(("release_trace", trace_id))

        @staticmethod
        def deallocate(tensor):
            pass

    class ModelArgs:
        def __init__(self, mesh, instruct, max_batch_size, optimizations, max_seq_len, cache_hf):
            chip.events.append(("ModelArgs", max_batch_size, max_seq_len))
            self.max_batch_size, self.max_seq_len = max_batch_size, max_seq_len
            self.vocab_size, self.max_prefill_chunk_size = chip.vocab_size, chip.max_prefill_chunk_size
            self.n_layers, self.model_name = 2, "fake"
            table = np.zeros((VOCAB, HIDDEN), np.float32)
            table[:, 0] = np.arange(VOCAB)
            weight = t(table)
            self.cached_hf_model = types.SimpleNamespace(get_input_embeddings=lambda: types.SimpleNamespace(weight=weight))
            self.tokenizer = types.SimpleNamespace(pad_token_id=None, eos_token_id=151643)

        def load_state_dict(self):
            return {}

        def weight_cache_path(self, dtype):
            return "/cache"

    class PagedAttentionConfig:
        def __init__(self, block_size, max_num_blocks):
            chip.events.append(("PagedAttentionConfig", block_size, max_num_blocks))
            self.block_size, self.max_num_blocks = block_size, max_num_blocks

    class Mode:
        PREFILL, DECODE = "prefill", "decode"

    class LATransformer:
        def __init__(self, args, mesh_device, dtype, state_dict, weight_cache_path, paged_attention_config):
            self.args, self.mode = args, None
            self.layers = [types.SimpleNamespace(attention=types.SimpleNamespace(layer_past=f"kv{i}")) for i in range(2)]

        def switch_mode(self, mode):
            self.mode = mode

        def prepare_inputs_prefill_embeds(self, embeds, start_pos, page_table, last_token_idx):
            assert self.mode == Mode.PREFILL and start_pos == 0
            self.pending = (np.asarray(embeds), np.asarray(page_table), last_token_idx)
            return Device(embeds), "rot", Device(page_table), None

        def ttnn_prefill_forward(self, x, rot_mats_global, rot_mats_local, user_id, page_table, get_last_token, kv_cache):
            embeds, table, last = self.pending
            assert user_id == 0 and kv_cache == ["kv0", "kv1"] and get_last_token == (last // 32) * 32
            chip.events.append(("prefill", table.tolist(), last + 1, embeds.shape[1]))
            row = table[0]
            for pos in range(min(embeds.shape[1], len(row) * A.PAGE_BLOCK_SIZE)):
                chip.write(row, pos, int(round(float(embeds[0, pos, 0]))))
            return Device(t(logits_row(score(chip.read(row, last + 1)))))

        def process_output_prefill(self, out, last_token_idx):
            assert last_token_idx == self.pending[2] % 32
            return out

    class MaskedLATransformer(LATransformer):
        """A port with the masked prefill: row r of the forward peaks at score(the contents
        of the columns the mask lets it read) + 7 * its position, so a wrong mask, layout
        or position shows up as a wrong token."""

        def prepare_inputs_prefill_embeds(self, embeds, start_pos, page_table, last_token_idx, positions=None):
            out = super().prepare_inputs_prefill_embeds(embeds, start_pos, page_table, last_token_idx)
            self.positions = None if positions is None else np.asarray(positions)
            return out

        def ttnn_prefill_forward(self, x, rot_mats_global, rot_mats_local, user_id, page_table, get_last_token,
                                 kv_cache, attn_mask=None):
            if attn_mask is None:
                return super().ttnn_prefill_forward(x, rot_mats_global, rot_mats_local, user_id, page_table,
                                                    get_last_token, kv_cache)
            embeds, table, start = self.pending
            n = embeds.shape[1]
            mask = np.asarray(attn_mask).reshape(n, n)
            assert get_last_token == start and start % 32 == 0 and self.positions.shape == (n,)
            contents = [int(round(float(embeds[0, c, 0]))) for c in range(n)]
            chip.events.append(("masked_prefill", table.tolist(), start, n))
            row = table[0]
            for pos in range(min(n, len(row) * A.PAGE_BLOCK_SIZE)):
                chip.write(row, pos, contents[pos])
            tile = np.zeros((32, PADDED_VOCAB), np.float32)
            for i in range(32):
                r = start + i
                if r < n:
                    seen = [contents[c] for c in range(n) if mask[r, c] == 0]
                    tile[i] = logits_row((score(seen) + 7 * int(self.positions[r])) % VOCAB)
            return Device(t(tile))

        def process_output_prefill(self, out, last_token_idx):
            if np.asarray(out).shape == (32, PADDED_VOCAB):  # a block step's tile
                return t(np.asarray(out)[last_token_idx])
            return super().process_output_prefill(out, last_token_idx)

    class Generator:
        def __init__(self, models, args, mesh):
            self.model, self.mode = models[0], None
            self.trace_ids_decode = {}
            self.calls = []

        def decode_forward(self, tokens, start_pos, page_table, kv_cache, enable_trace, reset_batch):
            tokens, positions, table = np.asarray(tokens), np.asarray(start_pos), np.asarray(page_table)
            batch = self.model.args.max_batch_size
            assert tokens.shape == (batch, 1) and positions.shape == (batch,), (tokens.shape, positions.shape)
            assert table.shape == (batch, A.PAGE_POOL_BLOCKS // batch) and kv_cache == [["kv0", "kv1"]]
            self.calls.append(types.SimpleNamespace(tokens=tokens[:, 0].tolist(), positions=positions.tolist(),
                                                    mode=self.mode, trace=enable_trace, reset_batch=reset_batch))
            self.mode = "decode"
            if enable_trace and not self.trace_ids_decode:
                trace_id = ttnn.begin_trace_capture("mesh", cq_id=0)
                chip.events.append(("capture_batch", tokens.shape[0]))
                if chip.fail_capture:
                    raise RuntimeError("fake capture failed")
                ttnn.end_trace_capture("mesh", trace_id, cq_id=0)
                self.trace_ids_decode = {False: {0: trace_id}}
            out = np.zeros((batch, 1, PADDED_VOCAB), np.float32)
            for u in range(batch):
                if positions[u] < 0:
                    out[u, 0] = logits_row(1)  # an idle user: whatever the device leaves there
                    continue
                chip.write(table[u], int(positions[u]), int(tokens[u, 0]))
                out[u, 0] = logits_row(score(chip.read(table[u], int(positions[u]) + 1)))
            return t(out), None

    class MoonViT:
        def __init__(self, mesh, weights_dir, grid, dtype, **kwargs):
            chip.events.append(("MoonViT", os.environ.get("TT_FUSED"), kwargs))
            self.grid = grid

        def forward(self, pixels):
            assert np.asarray(pixels).shape[1:] == (3, 14, 14)
            n = np.asarray(pixels).shape[0] // 4
            rows = np.zeros((n, HIDDEN), np.float32)
            rows[:, 0] = IMAGE_MARK + np.arange(n) + int(np.asarray(pixels).sum())
            return t(rows)

    def merge_vision_tokens(input_ids, text, image, cfg):
        out = np.array(text)
        out[0, np.asarray(input_ids)[0] == cfg.image_token_id] = np.asarray(image)
        return t(out)

    def preprocess_inputs_prefill(embeds, args, mask, pad_embedding):
        e = np.asarray(embeds[0])
        n = e.shape[0]
        padded = max(128, 1 << (n - 1).bit_length())
        out = np.concatenate([e, np.tile(np.asarray(pad_embedding), (padded - n, 1))])
        return [t(out)], [n], [padded]

    class FusedConfig:
        def __init__(self, enabled=True):
            self.enabled = enabled

        @classmethod
        def disabled(cls):
            return cls(enabled=False)

    precision = types.SimpleNamespace(accuracy=lambda n, name: "accuracy")
    return A.Stack(torch=fake_torch, np=np, ttnn=ttnn, PagedAttentionConfig=PagedAttentionConfig,
                   merge_vision_tokens=merge_vision_tokens, preprocess_inputs_prefill=preprocess_inputs_prefill,
                   Mode=Mode, Generator=Generator, DecodersPrecision=precision, MathFidelitySetting=None,
                   ModelArgs=ModelArgs, ModelOptimizations=None, OpGroup=None,
                   LATransformer=MaskedLATransformer if masked else LATransformer,
                   MoonViT=MoonViT, FusedConfig=FusedConfig if fused else None)


GRID = (4, 4)  # 4 image tokens: the warm-up prompt fits the 128-token prefill bucket


def patches_for(seed):
    return np.full(GRID[0] * GRID[1] * 3 * 14 * 14, seed, np.float32).tobytes()


def prompt(n_image, n_text):
    """A prompt of n_image image tokens and n_text text tokens."""
    return [151644, 872] + [151665] * n_image + [1000 + i for i in range(n_text)]


class DeviceEngineTest(unittest.TestCase):
    """The device code against the fakes (no ttnn, no torch)."""

    def setUp(self):
        for patcher in (mock.patch.dict(os.environ),  # the engine writes HF_MODEL and TT_FUSED
                        mock.patch.object(A, "log")):  # progress lines: noise here
            patcher.start()
            self.addCleanup(patcher.stop)
        os.environ.pop("TT_FUSED", None)
        self.exits = []

    def open(self, batch, chip=None, fused=True, masked=False, **options):
        chip = chip or Chip()
        o = {"canon_grid": f"{GRID[0]}x{GRID[1]}", "warmup_runs": "1", "warmup_decode_steps": "2"}
        o.update(options)
        settings = A.Settings.from_config(config(o, max_batch=batch, max_seq_len=A.PAGE_POOL_BLOCKS // batch * 32))
        engine = A.Engine(settings, fake_stack(chip, fused, masked), exit_process=self.exits.append)
        self.addCleanup(engine.close)
        return engine, chip

    def start(self, engine, slot, seed, n_text, want_prob=False):
        engine.vision(patches_for(seed), *GRID)
        return prefill(engine, slot, prompt(4, n_text), want_prob)

    def test_open_builds_for_the_batch_and_warms_up_at_it(self):
        engine, chip = self.open(4)
        self.assertIn(("ModelArgs", 4, A.PAGE_POOL_BLOCKS // 4 * 32), chip.events)
        self.assertIn(("PagedAttentionConfig", 32, A.PAGE_POOL_BLOCKS), chip.events)
        self.assertEqual(np.asarray(engine.page_table).tolist(), A.page_rows(4))
        self.assertEqual(os.environ["HF_MODEL"], "/llm")
        # Warm-up: every slot prefilled into its own row, the trace captured at 4 rows on the
        # first decode, then a partial batch with the idle users at position -1.
        prefills = [e for e in chip.events if e[0] == "prefill"]
        self.assertEqual([e[1][0] for e in prefills], [row[:A.blocks_for(e[2])] for row, e in zip(A.page_rows(4), prefills)])
        self.assertIn(("capture_batch", 4), chip.events)
        calls = engine.generator.calls
        self.assertEqual(len(calls), 3)
        self.assertTrue(all(c.trace for c in calls))
        n = prefills[0][2]
        self.assertEqual([c.positions for c in calls], [[n] * 4, [n + 1] * 4, [n + 2, -1, -1, -1]])
        self.assertEqual(calls[2].tokens[1:], [A.IDLE_TOKEN] * 3)
        self.assertEqual(engine.live, [False] * 4)

    def test_moonvit_is_built_legacy(self):
        _, chip = self.open(1)
        built = [e for e in chip.events if e[0] == "MoonViT"]
        self.assertEqual(len(built), 1)
        self.assertEqual(built[0][1], "0", "TT_FUSED=0 before MoonViT is built")
        self.assertFalse(built[0][2]["fused"].enabled)
        _, chip = self.open(1, fused=False)
        self.assertEqual([e[1:] for e in chip.events if e[0] == "MoonViT"], [("0", {})],
                         "no fused= without a FusedConfig")

    def test_batched_decode_gives_each_slot_its_tokens_alone(self):
        def run(engine, schedule, steps):
            """schedule: {step: [(slot, seed, n_text)]}, each started before that step's
            decode; every live slot decodes each step, in reverse order on odd steps.
            Returns each (seed, n_text) sequence's tokens."""
            last, seq_of, out = {}, {}, {}
            for step in range(steps):
                for slot, seed, n_text in schedule.get(step, []):
                    tok, _ = self.start(engine, slot, seed, n_text)
                    last[slot], seq_of[slot], out[(seed, n_text)] = tok, (seed, n_text), [tok]
                slots = sorted(last, reverse=step % 2 == 1)
                nxt, _ = decode(engine, slots, [last[s] for s in slots], False)
                for slot, tok in zip(slots, nxt):
                    last[slot] = tok
                    out[seq_of[slot]].append(tok)
            return out

        alone = {}
        for seed, n_text in [(1, 5), (2, 9), (3, 5)]:
            engine, _ = self.open(1)
            alone.update(run(engine, {0: [(0, seed, n_text)]}, 6))
        engine, _ = self.open(3)
        warm = len(engine.generator.calls)
        got = run(engine, {0: [(2, 1, 5)], 2: [(0, 2, 9)], 3: [(1, 3, 5)]}, 9)
        for key, want in alone.items():
            self.assertEqual(got[key][:len(want)], want, key)
        self.assertEqual(len(set(map(tuple, alone.values()))), 3, "the sequences differ from each other")
        # A position per user, -1 for the idle ones: slot 2 started at step 0, slot 0 at
        # step 2, slot 1 at step 3.
        calls = engine.generator.calls[warm:]
        n5, n9 = len(prompt(4, 5)), len(prompt(4, 9))
        self.assertEqual(calls[0].positions, [-1, -1, n5])
        self.assertEqual(calls[2].positions, [n9, -1, n5 + 2])
        self.assertEqual(calls[3].positions, [n9 + 1, n5, n5 + 3])
        self.assertEqual(calls[0].tokens[:2], [A.IDLE_TOKEN] * 2)
        self.assertEqual([c.reset_batch for c in calls[:5]], [True, False, True, True, False])

    def test_prefill_resets_the_generator_mode(self):
        engine, _ = self.open(2)
        tok, _ = self.start(engine, 0, 1, 5)
        self.assertEqual(engine.generator.mode, "prefill")
        decode(engine, [0], [tok], False)
        self.assertEqual(engine.generator.calls[-1].mode, "prefill", "the decode after a prefill saw the mode switch")
        decode(engine, [0], [tok], False)
        self.assertEqual(engine.generator.calls[-1].mode, "decode")

    def test_prompts_past_the_prefill_chunk_are_refused(self):
        engine, chip = self.open(2, chip=Chip(max_prefill_chunk_size=128))
        before = len(chip.events)
        engine.vision(patches_for(1), *GRID)
        with self.assertRaisesRegex(ValueError, "prompt of 200 tokens pads to 256, beyond the model's "
                                                "max_prefill_chunk_size 128: this adapter does not run chunked"):
            prefill(engine, 0, prompt(4, 194), False)
        self.assertEqual(chip.events[before:], [], "no device work for a refused prompt")
        self.assertFalse(engine.live[0])
        self.start(engine, 0, 1, 5)  # the kept image is still there for a prompt that fits
        with self.assertRaisesRegex(ValueError, "pads to 128, beyond the model's max_prefill_chunk_size 64"):
            self.open(1, chip=Chip(max_prefill_chunk_size=64))  # the warm-up prompt itself

    def test_vocabulary_must_match_the_checkpoint(self):
        chip = Chip(vocab_size=VOCAB + 23)
        with self.assertRaisesRegex(ValueError, f"vocabulary of {VOCAB + 23}, the checkpoint /snap one of {VOCAB}"):
            self.open(1, chip=chip)
        self.assertEqual(chip.events[-1], ("close_mesh_device", "mesh"))

    def test_logits_are_cut_at_the_vocabulary(self):
        engine, _ = self.open(2)
        tok, prob = self.start(engine, 1, 4, 7, want_prob=True)
        self.assertLess(tok, VOCAB)
        self.assertEqual(len(A.logits(engine, 0)), 4 * VOCAB)
        nxt, probs = decode(engine, [1], [tok], True)
        self.assertLess(nxt[0], VOCAB)
        row = np.frombuffer(A.logits(engine, 0), "<f4")
        self.assertEqual((len(row), int(row.argmax())), (VOCAB, nxt[0]))
        want = float(np.exp(np.float64(10)) / (np.exp(np.float64(10)) + VOCAB - 1))
        # Exponentials in float32, summed in float64: within 1e-6 relative.
        self.assertAlmostEqual(prob, want, delta=1e-6 * want)
        self.assertAlmostEqual(probs[0], want, delta=1e-6 * want)
        self.assertIsNone(A.logits(engine, 1))
        self.assertIsNone(decode(engine, [1], [nxt[0]], False)[1])

    def test_slot_rules(self):
        engine, _ = self.open(2)
        tok, _ = self.start(engine, 0, 1, 5)
        with self.assertRaisesRegex(ValueError, "slot 0: the image-context id .* only a free slot's prompt may hold"):
            self.start(engine, 0, 1, 5)  # a prompt with an image on a live slot
        with self.assertRaisesRegex(ValueError, "slot 0: the image-context id .* only a free slot's prompt may hold"):
            step(engine, [0], [[]], [[tok, CONFIG["image_token_id"]]], 3, [])  # or in a block
        with self.assertRaisesRegex(ValueError, "slot 1 is free: a step on it is its prefill"):
            step(engine, [1], [[]], [[tok]], 3, [])
        with self.assertRaisesRegex(ValueError, "repeat a slot"):
            decode(engine, [0, 0], [tok, tok], False)
        with self.assertRaisesRegex(ValueError, "slot 2 out of range 0..1"):
            engine.release(2)
        engine.release(0)
        engine.release(0)
        with self.assertRaisesRegex(ValueError, "slot 0 is free"):
            step(engine, [0], [[]], [[tok]], 3, [])
        engine.pos[1], engine.live[1] = engine.s.max_seq_len, True
        with self.assertRaisesRegex(ValueError, "slot 1 is full"):
            decode(engine, [1], [tok], False)

    def test_close_releases_the_traces_before_the_mesh(self):
        engine, chip = self.open(2)
        captured = [e[1] for e in chip.events if e[0] == "end_trace_capture"]
        self.assertEqual(len(captured), 1)
        engine.close()
        tail = chip.events[-2:]
        self.assertEqual(tail, [("release_trace", captured[0]), ("close_mesh_device", "mesh")])
        engine.close()  # closing twice does nothing
        self.assertEqual(chip.events[-2:], tail)
        self.assertEqual(self.exits, [])

    def test_without_trace_nothing_is_captured_or_released(self):
        engine, chip = self.open(2, trace="0")
        engine.close()
        self.assertFalse([e for e in chip.events if "trace" in e[0]])
        self.assertEqual(chip.events[-1], ("close_mesh_device", "mesh"))

    def test_a_failed_capture_exits_instead_of_closing(self):
        chip = Chip(fail_capture=True)
        with self.assertRaisesRegex(RuntimeError, "fake capture failed"):
            self.open(2, chip=chip)
        self.assertEqual(self.exits, [A.EXIT_DEVICE_UNSAFE])
        self.assertNotIn(("close_mesh_device", "mesh"), chip.events)
        self.assertEqual(chip.events[-1][0], "capture_batch", "nothing after the capture began")


class StepPartsTest(unittest.TestCase):
    """The host side of a block step, without a device."""

    def test_block_layout_starts_the_block_on_a_tile(self):
        self.assertEqual(A.block_layout(64, 6), (64, list(range(64)) + [63, 64, 65, 66, 67, 68]))
        start, positions = A.block_layout(70, 3)
        self.assertEqual(start, 96)
        self.assertEqual(positions[:70], list(range(70)))
        self.assertEqual(positions[70:96], [69] * 26)
        self.assertEqual(positions[96:], [69, 70, 71])

    def test_step_mask(self):
        # 3 committed rows, a filler row, a block of 2 at row 4, a padding row.
        want = np.array([
            [1, 0, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0, 0],
            [0, 0, 0, 1, 0, 0, 0],  # filler: itself only
            [1, 1, 0, 0, 1, 1, 0],  # block: all committed but the last, the block both ways
            [1, 1, 0, 0, 1, 1, 0],
            [1, 1, 1, 0, 0, 0, 1],  # padding
        ], bool)
        np.testing.assert_array_equal(A.step_mask(np, 3, 4, 2, 7), want)

    def test_ranked(self):
        row = np.zeros(8, np.float32)
        row[[6, 2]] = 3.0
        ids, probs, watch = A.ranked(np, row, 4, [2, 7])
        self.assertEqual(ids, [2, 6, 0, 1])
        self.assertEqual(probs[0], probs[1])
        self.assertEqual(watch[0], probs[0])
        self.assertEqual(watch[1], probs[2])

    def test_masked_prefill_support(self):
        class Stock:
            def prepare_inputs_prefill_embeds(self, embeds, start_pos, page_table, last_token_idx):
                pass

            def ttnn_prefill_forward(self, x, rot_mats_global, user_id, page_table, get_last_token, kv_cache):
                pass

        class Port(Stock):
            def prepare_inputs_prefill_embeds(self, embeds, start_pos, page_table, last_token_idx, positions=None):
                pass

            def ttnn_prefill_forward(self, x, **kwargs):
                pass

        self.assertIsNone(A.masked_prefill_support(Port()))
        why = A.masked_prefill_support(Stock())
        self.assertIn("prepare_inputs_prefill_embeds(positions=...), ttnn_prefill_forward(attn_mask=...)", why)
        self.assertIn("AR decoding is unaffected", why)


class DeviceStepTest(DeviceEngineTest):
    """The block step's device code against the fakes."""

    def contents(self, chip, engine, slot, n):
        return chip.read(engine.page_table[slot], n)

    def test_block_rows_read_what_the_mask_allows(self):
        engine, chip = self.open(2, masked=True)
        self.assertIn("masked_prefill", [e[0] for e in chip.events], "the warm-up compiles a block step")
        self.start(engine, 1, 3, 5)
        held = engine.pos[1]
        committed = self.contents(chip, engine, 1, held)  # what the plain prefill wrote
        block = [900, 901, 902, 903, 904, 905]
        rows = step(engine, [1], [[]], [block], 3, [7])
        self.assertEqual(len(rows), 6)
        for i, (ids, probs, watch) in enumerate(rows):
            want = (score(committed[:held - 1] + block) + 7 * (held - 1 + i)) % VOCAB
            self.assertEqual(ids[0], want, f"row {i}")
            self.assertEqual(len(watch), 1)
        self.assertEqual(engine.pos[1], held, "a block takes no room")
        self.assertEqual(self.contents(chip, engine, 1, held), committed, "the committed rows rewrote the same pages")
        # Pending tokens and a second block: the committed sequence grows by them.
        pending = [11, 12, 13]
        rows = step(engine, [1], [pending], [block], 3, [])
        for i, (ids, _, _) in enumerate(rows):
            want = (score(committed + pending[:-1] + block) + 7 * (held + 2 + i)) % VOCAB
            self.assertEqual(ids[0], want, f"row {i} after pending tokens")
        self.assertEqual(engine.pos[1], held + 3)
        self.assertEqual(len(A.logits(engine, 5)), 4 * VOCAB)
        # The cache then decodes as if the block had never run.
        nxt, _ = decode(engine, [1], [14], False)
        self.assertEqual(nxt[0], score(committed + pending + [14]))

    def test_one_token_rows_are_decodes(self):
        engine, chip = self.open(3, masked=True)
        tok0, _ = self.start(engine, 0, 1, 5)
        tok2, _ = self.start(engine, 2, 2, 7)
        calls = len(engine.generator.calls)
        rows = step(engine, [2, 0], [[tok2, 5, 6], [tok0]], [[], []], 2, [])
        new = engine.generator.calls[calls:]
        n5, n7 = len(prompt(4, 5)), len(prompt(4, 7))
        self.assertEqual([c.positions for c in new], [[n5, -1, n7], [-1, -1, n7 + 1], [-1, -1, n7 + 2]])
        self.assertEqual((engine.pos[0], engine.pos[2]), (n5 + 1, n7 + 3))
        ref, _ = self.open(3, masked=True)
        self.start(ref, 2, 2, 7)
        for tok in (tok2, 5):
            decode(ref, [2], [tok], False)
        want, _ = decode(ref, [2], [6], False)
        self.assertEqual(rows[0][0][0], want[0], "slot 2's row is its last pending token's decode")
        self.assertEqual(len(rows), 2)

    def test_an_all_ar_step_is_one_traced_decode(self):
        """The fast path inside step: every slot live with one pending token, no block, an
        output row: one Generator decode call for all of them, traced like the warm-up's."""
        engine, _ = self.open(3, masked=True)
        tok0, _ = self.start(engine, 0, 1, 5)
        tok1, _ = self.start(engine, 1, 2, 7)
        calls = len(engine.generator.calls)
        rows = step(engine, [1, 0], [[tok1], [tok0]], [[], []], 1, [])
        new = engine.generator.calls[calls:]
        self.assertEqual(len(new), 1)
        self.assertTrue(new[0].trace)
        self.assertEqual(new[0].positions, [len(prompt(4, 5)), len(prompt(4, 7)), -1])
        self.assertEqual(len(rows), 2)

    def test_a_prompt_and_no_output_in_one_step(self):
        """A free slot's prompt (its prefill) beside a live slot's AR row, and a prompt
        cached without a row: rows only where asked, the same tokens as alone."""
        engine, _ = self.open(3, masked=True)
        tok0, _ = self.start(engine, 0, 1, 5)
        engine.vision(patches_for(2), *GRID)
        rows = A.step(engine, [0, 2], [[tok0], prompt(4, 7)], [[], []], [False, True], 1, [])
        self.assertEqual(len(rows), 1, "slot 2's prompt gives no row")
        self.assertTrue(engine.live[2])
        self.assertEqual(engine.pos[2], len(prompt(4, 7)))
        self.assertIsNone(engine.image, "the prompt consumed the image")
        ref, _ = self.open(3, masked=True)
        rtok0, _ = self.start(ref, 0, 1, 5)
        want, _ = decode(ref, [0], [rtok0], False)
        self.assertEqual(rows[0][0][0], want[0])
        engine.vision(patches_for(3), *GRID)
        block = [900, 901, 902]
        rows = A.step(engine, [1], [prompt(4, 5)], [block], [False], 2, [])
        self.assertEqual(len(rows), 3, "a prompt and a block in one step: the block's rows")
        with self.assertRaisesRegex(ValueError, "no_output with a block"):
            A.step(engine, [1], [[]], [block], [True], 2, [])

    def test_block_causal_mask(self):
        both = A.step_mask(np, 3, 4, 2, 7)
        causal = A.step_mask(np, 3, 4, 2, 7, block_causal=True)
        np.testing.assert_array_equal(causal[4:6, 4:6], np.tril(np.ones((2, 2), bool)))
        self.assertTrue(both[4:6, 4:6].all())
        both[4:6, 4:6] = causal[4:6, 4:6]
        np.testing.assert_array_equal(both, causal, "only the block's own columns differ")
        s = A.Settings.from_config(config({}, block_causal=1))
        self.assertTrue(s.block_causal)

    def test_without_a_masked_prefill_block_steps_fail_clearly(self):
        engine, chip = self.open(2)
        self.assertNotIn("masked_prefill", [e[0] for e in chip.events])
        tok, _ = self.start(engine, 0, 1, 5)
        with self.assertRaisesRegex(RuntimeError, "no masked prefill"):
            step(engine, [0], [[]], [[tok] * 6], 3, [])
        step(engine, [0], [[tok]], [[]], 3, [])  # one-token rows run on the decode path

    def test_step_refusals(self):
        engine, _ = self.open(2, masked=True)
        tok, _ = self.start(engine, 0, 1, 5)
        cases = {
            "slot 1 is free: a step on it is its prefill": ([1], [[]], [[tok]], 3, []),
            "repeat a slot": ([0, 0], [[tok], [tok]], [[], []], 3, []),
            "k 9": ([0], [[tok]], [[]], 9, []),
            "one or the other": ([0], [[]], [[]], 3, []),
            "at most 16 of each on a live slot": ([0], [[tok] * 17], [[]], 3, []),
            "outside the vocabulary": ([0], [[tok]], [[]], 3, [VOCAB]),
        }
        for want, args in cases.items():
            with self.subTest(want=want), self.assertRaisesRegex(ValueError, want):
                step(engine, *args)
        pos = engine.pos[0]
        engine.pos[0] = engine.s.max_seq_len - 20  # a block needs room to the next tile and 6 more
        with self.assertRaisesRegex(ValueError, "beyond the slot's .* positions of the KV pool"):
            step(engine, [0], [[]], [[tok] * 6], 3, [])
        engine.pos[0] = pos


if __name__ == "__main__":
    unittest.main()
