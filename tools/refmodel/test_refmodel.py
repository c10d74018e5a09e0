"""Tests of the reference: each part against an independent formulation of the same
maths, plus checks that the committed checkpoints and goldens are what the code makes.

    cd tools/refmodel && /usr/bin/python3 -m unittest -v
"""

import json
import math
import os
import tempfile
import unittest

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

import gen_checkpoint
import model as M
import safetensors_io
from config import LM_HEAD, Config, expected_tensors
from preprocess import canonical_size, preprocess, to_rgb
from prompt import PromptBuilder

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKPOINTS = os.path.join(HERE, "..", "..", "testdata", "checkpoints")


def tiny_cfg(preset="tiny-f32"):
    return gen_checkpoint.PRESETS[preset]["cfg"]


def random_model(preset="tiny-f32", lm_head=False, seed=0):
    torch.manual_seed(seed)
    m = M.LocateAnything(tiny_cfg(preset), lm_head=lm_head)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
    return m.eval()


class SafetensorsTest(unittest.TestCase):
    def test_roundtrip_every_dtype_single_and_sharded(self):
        tensors = {"a.weight": torch.randn(3, 5), "b.bias": torch.randn(7), "c": torch.randn(2, 2, 2)}
        specs = [(n, tuple(t.shape)) for n, t in tensors.items()]
        for dtype, tol in (("F32", 0), ("F16", 1e-3), ("BF16", 1e-2)):
            for shards in (1, 2):
                with tempfile.TemporaryDirectory() as d:
                    safetensors_io.write_checkpoint_weights(d, specs, dtype, lambda n, _: tensors[n], shards)
                    back = safetensors_io.read_checkpoint_weights(d)
                    self.assertEqual(set(back), set(tensors))
                    for n, t in tensors.items():
                        torch.testing.assert_close(back[n], t, rtol=tol, atol=tol)
                    if shards == 2:
                        with open(os.path.join(d, safetensors_io.INDEX_FILE)) as f:
                            self.assertEqual(len(set(json.load(f)["weight_map"].values())), 2)

    def test_bf16_bytes_are_the_top_half_of_f32(self):
        x = torch.tensor([1.0, -2.5, 3.140625])  # exact in bf16
        raw = safetensors_io.tensor_bytes(x, "BF16")
        f32 = np.frombuffer(x.numpy().astype("<f4").tobytes(), "<u4")
        self.assertEqual(np.frombuffer(raw, "<u2").tolist(), (f32 >> 16).tolist())

    def test_header_is_aligned(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "x.safetensors")
            safetensors_io.write_file(p, [("x", (3,))], "F32", lambda n, s: torch.zeros(s))
            with open(p, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
            self.assertEqual((8 + n) % 8, 0)


class NamesTest(unittest.TestCase):
    def test_state_dict_is_the_expected_tensor_list(self):
        for preset in ("tiny-bf16", "tiny-f32", "full"):
            cfg = tiny_cfg(preset)
            specs = expected_tensors(cfg)
            if preset == "full":
                # The real checkpoint: 769 tensors + the head.
                self.assertEqual(len(specs) + 1, 770)
                continue
            for lm_head in (False, True):
                m = M.LocateAnything(cfg, lm_head=lm_head)
                got = {k: tuple(v.shape) for k, v in m.state_dict().items()}
                want = dict(specs)
                if lm_head:
                    want[LM_HEAD] = (cfg.text.vocab, cfg.text.hidden)
                self.assertEqual(got, want)

    def test_config_json_roundtrip(self):
        for preset in ("tiny-bf16", "tiny-f32", "full"):
            cfg = tiny_cfg(preset)
            with tempfile.TemporaryDirectory() as d:
                cfg.save(d)
                self.assertEqual(Config.load(d), cfg)
                with open(os.path.join(d, "config.json")) as f:
                    raw = json.load(f)
                self.assertEqual(raw["model_type"], "locateanything")
                self.assertEqual("head_dim" in raw["text_config"], cfg.text.write_head_dim)


class CheckpointRoundtripTest(unittest.TestCase):
    def test_save_then_load_gives_the_same_model(self):
        for lm_head, dtype, shards in ((False, "F32", 1), (True, "BF16", 2)):
            m = random_model("tiny-bf16", lm_head=lm_head)
            with tempfile.TemporaryDirectory() as d:
                M.save_checkpoint(m, d, dtype, shards)
                back = M.load_checkpoint(d)
            self.assertEqual(back.language_model.lm_head is not None, lm_head)
            ids = torch.randint(0, 1000, (1, 5))
            tol = 0 if dtype == "F32" else 0.1
            torch.testing.assert_close(back(ids), m(ids), rtol=tol, atol=tol)


class VisionTest(unittest.TestCase):
    def test_patch_embed_is_a_linear_over_channel_row_col(self):
        m = random_model()
        pe = m.vision_model.patch_embed.proj
        patches = torch.randn(6, 3, 14, 14)
        conv = pe(patches).flatten(1)
        linear = patches.reshape(6, 588) @ pe.weight.reshape(pe.weight.shape[0], 588).t() + pe.bias
        torch.testing.assert_close(conv, linear, rtol=1e-5, atol=1e-5)

    def test_rope_2d_against_complex_multiplication(self):
        gh, gw, hd = 3, 5, 16
        x = torch.randn(gh * gw, 2, hd, dtype=torch.float64)
        got = M.apply_rope_adjacent(x, M.rope_2d_angles(gh, gw, hd))
        # Independent: for every patch (r, c) and element pair j, multiply the complex
        # number x[2j] + i x[2j+1] by exp(i * angle), angle = c*f (j even) or r*f (j odd).
        want = torch.empty_like(x)
        for p in range(gh * gw):
            r, c = divmod(p, gw)
            for j in range(hd // 2):
                f = 10000.0 ** (-4.0 * (j // 2) / hd)
                ang = (c if j % 2 == 0 else r) * f
                z = torch.complex(x[p, :, 2 * j], x[p, :, 2 * j + 1]) * complex(math.cos(ang), math.sin(ang))
                want[p, :, 2 * j], want[p, :, 2 * j + 1] = z.real, z.imag
        torch.testing.assert_close(got, want)

    def test_rope_2d_keeps_norms_and_is_relative(self):
        gh, gw, hd = 4, 4, 8
        ang = M.rope_2d_angles(gh, gw, hd)
        q, k = torch.randn(1, 1, hd, dtype=torch.float64), torch.randn(1, 1, hd, dtype=torch.float64)

        def dot(pq, pk):
            return float((M.apply_rope_adjacent(q, ang[pq:pq + 1]) * M.apply_rope_adjacent(k, ang[pk:pk + 1])).sum())
        # Same offset (one row down, one column right) from two places: same score.
        self.assertAlmostEqual(dot(0, 5), dot(5, 10), places=10)
        self.assertNotAlmostEqual(dot(0, 1), dot(0, 4), places=3)  # column and row differ

    def test_bicubic_pos_emb_matches_the_written_kernel(self):
        # The kernel a backend must implement: torch bicubic, a = -0.75, align_corners
        # False, source x = (dst + 0.5) * in/out - 0.5, taps clamped at the borders.
        def cubic_weights(t, a=-0.75):
            def near(x):
                return ((a + 2) * x - (a + 3)) * x * x + 1

            def far(x):
                return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
            return [far(t + 1), near(t), near(1 - t), far(2 - t)]

        def resize_axis(w, out, axis):
            n = w.shape[axis]
            res = []
            for o in range(out):
                src = (o + 0.5) * n / out - 0.5
                i0 = math.floor(src)
                ws = cubic_weights(src - i0)
                acc = 0
                for k in range(4):
                    idx = min(max(i0 - 1 + k, 0), n - 1)
                    acc = acc + ws[k] * np.take(w, idx, axis=axis)
                res.append(acc)
            return np.stack(res, axis=axis)

        pe = M.PosEmb(8, 10, 4)
        with torch.no_grad():
            pe.weight.normal_()
        w = pe.weight.detach().double().numpy()
        for gh, gw in ((8, 10), (14, 20), (6, 4), (10, 16)):
            want = resize_axis(resize_axis(w, gh, 0), gw, 1).reshape(gh * gw, 4)
            got = pe(gh, gw).detach().double().numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(pe(8, 10).detach().numpy(), pe.weight.detach().reshape(80, 4).numpy())

    def test_merge_order(self):
        gh, gw, C = 4, 6, 1
        x = torch.arange(gh * gw, dtype=torch.float32).reshape(gh * gw, C)  # value = r*gw + c
        merged = M.merge_patches(x, gh, gw, 2)
        self.assertEqual(tuple(merged.shape), (6, 4))
        # Block (0,0): patches (0,0) (0,1) (1,0) (1,1); block (0,1) starts at column 2.
        self.assertEqual(merged[0].tolist(), [0, 1, 6, 7])
        self.assertEqual(merged[1].tolist(), [2, 3, 8, 9])
        self.assertEqual(merged[3].tolist(), [12, 13, 18, 19])
        with self.assertRaises(ValueError):
            M.merge_patches(torch.zeros(15, 1), 3, 5, 2)

    def test_attention_is_bidirectional_and_permutation_consistent(self):
        # Without RoPE and position embedding differences, moving a patch's content moves
        # its output: check that every patch sees every other (changing the last patch
        # changes the first patch's output).
        m = random_model()
        patches = torch.randn(16, 3, 14, 14)
        out = m.vision_features(patches, 4, 4)
        patches2 = patches.clone()
        patches2[-1] += 1
        out2 = m.vision_features(patches2, 4, 4)
        self.assertGreater(float((out[0] - out2[0]).abs().max()), 1e-4)


class DecoderTest(unittest.TestCase):
    def test_causal(self):
        m = random_model()
        ids = torch.randint(0, 1000, (1, 12))
        full = m(ids)
        prefix = m(ids[:, :7])
        torch.testing.assert_close(full[:, :7], prefix, rtol=1e-4, atol=1e-4)

    def test_gqa_attention_against_per_head_loop(self):
        cfg = tiny_cfg("tiny-bf16")  # 4 heads over 2 KV heads
        m = random_model("tiny-bf16")
        attn = m.language_model.model.layers[0].self_attn
        S, hd = 5, cfg.text.head_dim
        x = torch.randn(1, S, cfg.text.hidden)
        cos, sin = M.rope_1d_cos_sin(torch.arange(S), hd, cfg.text.rope_theta)
        got = attn(x, cos, sin)
        q = attn.q_proj(x)[0].view(S, cfg.text.heads, hd)
        k = attn.k_proj(x)[0].view(S, cfg.text.kv_heads, hd)
        v = attn.v_proj(x)[0].view(S, cfg.text.kv_heads, hd)
        outs = []
        for h in range(cfg.text.heads):
            g = h // (cfg.text.heads // cfg.text.kv_heads)
            rows = []
            for i in range(S):
                def rot(vec, pos):  # rotate-half: pair (j, j + hd/2) turns by pos * theta^(-2j/hd)
                    out = vec.clone()
                    for j in range(hd // 2):
                        a = pos * cfg.text.rope_theta ** (-2.0 * j / hd)
                        out[j] = vec[j] * math.cos(a) - vec[j + hd // 2] * math.sin(a)
                        out[j + hd // 2] = vec[j + hd // 2] * math.cos(a) + vec[j] * math.sin(a)
                    return out
                qi = rot(q[i, h], i)
                scores = torch.stack([qi @ rot(k[j, g], j) for j in range(i + 1)]) / math.sqrt(hd)
                rows.append(scores.softmax(0) @ v[: i + 1, g])
            outs.append(torch.stack(rows))
        want = attn.o_proj(torch.cat(outs, dim=-1))[None]
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)

    def test_image_splice_and_count_check(self):
        m = random_model()
        img = m.cfg.image_token_id
        ids = torch.tensor([[5, img, img, 9]])
        emb = torch.randn(2, m.cfg.text.hidden)
        x = m.embed(ids, emb)
        torch.testing.assert_close(x[0, 1], emb[0])
        torch.testing.assert_close(x[0, 2], emb[1])
        with self.assertRaisesRegex(ValueError, "2 image tokens but 1"):
            m.embed(ids, emb[:1])

    def test_tied_and_untied_heads(self):
        tied = random_model(lm_head=False)
        ids = torch.randint(0, 1000, (1, 4))
        h = tied.language_model.model(tied.embed(ids))
        torch.testing.assert_close(tied(ids), h @ tied.language_model.model.embed_tokens.weight.t())
        head = random_model(lm_head=True)
        self.assertIsNotNone(head.language_model.lm_head)

    def test_greedy_matches_argmax_chain(self):
        m = random_model()
        ids = torch.randint(0, 1000, (6,))
        toks, margins, first = m.greedy(ids, None, 3)
        self.assertEqual(toks[0], int(first.argmax()))
        seq = torch.cat((ids, torch.tensor(toks[:2])))
        self.assertEqual(toks[2], int(m(seq[None])[0, -1].argmax()))
        self.assertTrue(all(x >= 0 for x in margins))


class PreprocessTest(unittest.TestCase):
    def test_worked_example(self):
        # docs/background.md, "Preprocessing": 1920x1080 at 1024 -> 616x336, grid 24x44.
        self.assertEqual(canonical_size(1920, 1080, 1024), (598, 336, 616, 336))
        patches, gh, gw, size = preprocess(Image.new("RGB", (1920, 1080), (255, 0, 128)), 1024)
        self.assertEqual((gh, gw, size, tuple(patches.shape)), (24, 44, (616, 336), (1056, 3, 14, 14)))
        torch.testing.assert_close(patches[0, :, 0, 0], torch.tensor([1.0, -1.0, 128 / 127.5 - 1]))

    def test_small_image_is_only_rounded_up(self):
        self.assertEqual(canonical_size(112, 112, 64), (112, 112, 112, 112))
        self.assertEqual(canonical_size(100, 30, 1024), (100, 30, 112, 56))

    def test_refusals(self):
        with self.assertRaises(ValueError):
            canonical_size(0, 10, 1024)
        with self.assertRaisesRegex(ValueError, "grid"):
            canonical_size(8000, 20, 10**9)
        with self.assertRaisesRegex(ValueError, "extreme"):
            canonical_size(1000000, 14, 64)

    def test_patch_order_is_row_major_channel_row_col(self):
        img = Image.fromarray(np.random.RandomState(0).randint(0, 256, (56, 84, 3), dtype=np.uint8))
        patches, gh, gw, _ = preprocess(img, 10**6)
        a = (np.asarray(img, dtype=np.float32) / 255 - 0.5) / 0.5
        self.assertEqual((gh, gw), (4, 6))
        # Patch 7 is grid row 1, column 1; element [c, y, x] is pixel (14 + y, 14 + x), channel c.
        np.testing.assert_allclose(patches[7].numpy(), a[14:28, 14:28].transpose(2, 0, 1))

    def test_alpha_is_composited_on_white(self):
        img = Image.new("RGBA", (2, 1), (0, 0, 0, 0))
        img.putpixel((1, 0), (0, 0, 0, 255))
        self.assertEqual(list(to_rgb(img).getdata()), [(255, 255, 255), (0, 0, 0)])


class PromptTest(unittest.TestCase):
    def test_worked_example_length_and_layout(self):
        b = PromptBuilder(os.path.join(CHECKPOINTS, "tiny-bf16", "added_tokens.json"),
                          os.path.join(HERE, "testdata", "golden-encodings.jsonl"))
        ids = b.build("Locate all the instances that matches the following description: car.", 264)
        self.assertEqual(len(ids), 303)  # the documented worked example
        self.assertEqual(ids[:2], [151644, 8948])
        self.assertEqual(ids.count(151665), 264)
        self.assertEqual(ids[-5:], [151645, 198, 151644, 77091, 198])


class CommittedDataTest(unittest.TestCase):
    """The committed checkpoints and goldens are exactly what the generators make."""

    def test_regenerated_tiny_checkpoint_is_byte_identical(self):
        with tempfile.TemporaryDirectory() as d:
            gen_checkpoint.generate("tiny-bf16", d, 1, os.path.join(CHECKPOINTS, "tiny-bf16"))
            for name in os.listdir(d):
                with open(os.path.join(d, name), "rb") as a, open(os.path.join(CHECKPOINTS, "tiny-bf16", name), "rb") as b:
                    self.assertTrue(a.read() == b.read(), f"{name} differs from the committed one")

    def test_goldens_reproduce(self):
        for ckpt in ("tiny-bf16", "tiny-f32"):
            d = os.path.join(CHECKPOINTS, ckpt)
            with open(os.path.join(d, "goldens", "index.json")) as f:
                index = json.load(f)
            m = M.load_checkpoint(d)
            case = index["cases"][0]

            def load(key):
                spec = case["files"][key]
                dt = {"float32": "<f4", "int32": "<i4"}[spec["dtype"]]
                return torch.from_numpy(np.fromfile(os.path.join(d, "goldens", spec["file"]), dt).reshape(spec["shape"]))
            patches, ids = load("patches"), load("prompt_ids").long()
            emb = m.encode_image(patches, case["grid_h"], case["grid_w"])
            torch.testing.assert_close(emb, load("image_embeddings"), rtol=1e-4, atol=1e-4)
            toks, _, logits = m.greedy(ids, emb, 4)
            torch.testing.assert_close(logits, load("prefill_logits"), rtol=1e-4, atol=1e-4)
            self.assertEqual(toks, case["greedy_ids"][:4])
            self.assertEqual(int((ids == m.cfg.image_token_id).sum()), case["num_image_tokens"])


if __name__ == "__main__":
    unittest.main()
