"""Tests of the numpy stand-in's step (parallel box decoding, docs/hybrid-decoding.md) on
the committed random checkpoint testdata/checkpoints/tiny-f32: the step mask, the ranking
rule, a block computed beside the cache equal to pending and block in one forward, the
block's keys and values never kept, a row without a block equal to a decode, batching
invariance, a prompt cached without output, the block_causal mask, and refused calls that
change nothing.
The Go tests (engine/native ttnn_step_test.go) hold the same step, through the bridge, to
the PyTorch reference's goldens.
Run: cd engine/ttnn && /usr/bin/python3 -m unittest -v test_la_ttnn_standin. Needs only numpy."""

import json
import os
import unittest

import numpy as np

import la_ttnn_standin as S

CKPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata", "checkpoints", "tiny-f32")
TEXT_MASK = 151676
BLOCK = 6


def tiny_config(max_batch=3, max_seq_len=64, options="", block_causal=0):
    """open()'s config for the tiny checkpoint, as the bridge builds it from la_config."""
    with open(os.path.join(CKPT, "config.json")) as f:
        cfg = json.load(f)
    t, v = cfg["text_config"], cfg["vision_config"]
    return {
        "vision_hidden": v["hidden_size"], "vision_layers": v["num_hidden_layers"],
        "vision_heads": v["num_attention_heads"], "vision_intermediate": v["intermediate_size"],
        "patch_size": v["patch_size"], "merge_kernel": v["merge_kernel_size"][0],
        "pos_emb_height": v["init_pos_emb_height"], "pos_emb_width": v["init_pos_emb_width"],
        "vision_norm_eps": 1e-5, "hidden": t["hidden_size"], "layers": t["num_hidden_layers"],
        "heads": t["num_attention_heads"], "kv_heads": t["num_key_value_heads"], "head_dim": t["head_dim"],
        "intermediate": t["intermediate_size"], "vocab": t["vocab_size"], "rope_theta": t["rope_theta"],
        "rms_norm_eps": t["rms_norm_eps"], "image_token_id": cfg["image_token_index"], "max_seq_len": max_seq_len,
        "max_batch": max_batch, "threads": 1, "weights_dir": CKPT, "llm_dir": "", "options": options,
        "block_causal": block_causal,
    }


def step(e, slots, pending, blocks, k, watch):
    """A step with an output row for every slot (no no_output)."""
    return e.step(slots, pending, blocks, [False] * len(slots), k, watch)


def prefill(e, slot, ids):
    """A prompt into the free slot, cached without an output row."""
    return e.step([slot], [ids], [[]], [True], 1, [])


def text(n, seed):
    """n text token ids (no image token), the same for the same seed."""
    return [int(t) for t in np.random.default_rng(seed).integers(1000, 150000, n)]


def block_after(committed):
    return [committed[-1]] + [TEXT_MASK] * (BLOCK - 1)


class StepMaskTest(unittest.TestCase):
    def test_mask_is_the_spec(self):
        # 2 cached, 2 pending, a block of 3: columns c0 c1 | p0 p1 | b0 b1 b2.
        want = np.array([
            [1, 1, 1, 0, 0, 0, 0],  # p0: causal
            [1, 1, 1, 1, 0, 0, 0],  # p1
            [1, 1, 1, 0, 1, 1, 1],  # b0..b2: all but the last committed column (p1), the block both ways
            [1, 1, 1, 0, 1, 1, 1],
            [1, 1, 1, 0, 1, 1, 1],
        ], bool)
        np.testing.assert_array_equal(S.step_mask(2, 2, 3), want)
        np.testing.assert_array_equal(S.step_mask(3, 0, 2), np.array([[1, 1, 0, 1, 1]] * 2, bool))
        np.testing.assert_array_equal(S.step_mask(1, 2, 0), np.array([[1, 1, 0], [1, 1, 1]], bool))


class RankedTest(unittest.TestCase):
    def test_ties_go_to_the_lower_id_and_probabilities_are_float32_softmax(self):
        row = np.zeros(10, np.float32)
        row[[7, 3, 5]] = 2.0  # three equal maxima
        row[1] = 1.0
        ids, probs, watch = S.ranked(row, 5, [5, 9, 1])
        self.assertEqual(ids, [3, 5, 7, 1, 0])
        e = np.exp(row - np.float32(2))
        p = e / e.sum(dtype=np.float32)
        self.assertEqual(probs, [float(p[i]) for i in ids])
        self.assertEqual(watch, [float(p[5]), float(p[9]), float(p[1])])
        self.assertTrue(all(isinstance(v, float) for v in probs + watch))


class StandinStepTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.engine = S.open(tiny_config())

    def test_no_output_caches_without_a_row(self):
        """A prompt run with no_output holds the same cache as one with its row: the next
        step's rows are bit for bit equal."""
        e = self.engine
        prompt = text(9, 12)
        rows = e.step([0, 1], [prompt, prompt], [[], []], [True, False], 2, [])
        self.assertEqual(len(rows), 1, "one output row: slot 1's")
        self.assertEqual(rows, [S.ranked(e.last_logits[0], 2, [])])
        self.assertEqual(e.pos[:2], [9, 9])
        rows = step(e, [0, 1], [[7], [7]], [[], []], 3, [])
        self.assertEqual(rows[0], rows[1])
        with self.assertRaisesRegex(ValueError, "no_output with a block"):
            e.step([0], [[]], [[1, 2]], [True], 3, [])

    def test_block_causal_mask(self):
        """With block_causal (text_config.causal_attn) a block row sees the rows of its
        block up to itself; without, all of them."""
        both = S.step_mask(2, 1, 3)
        causal = S.step_mask(2, 1, 3, block_causal=True)
        np.testing.assert_array_equal(both[:, :3], causal[:, :3])
        np.testing.assert_array_equal(causal[1:, 3:], np.tril(np.ones((3, 3), bool)))
        self.assertTrue(both[1:, 3:].all())
        e = S.open(tiny_config(block_causal=1))
        prefill(e, 0, text(6, 13))
        e.step([0], [[]], [[5, 6, 7]], [False], 1, [])
        last = np.stack(e.last_logits)
        prefill(self.engine, 0, text(6, 13))
        self.engine.step([0], [[]], [[5, 6, 7]], [False], 1, [])
        both_rows = np.stack(self.engine.last_logits)
        self.assertFalse(np.array_equal(last[0], both_rows[0]), "row 0 sees rows 1 and 2 only without block_causal")
        self.assertEqual(e.pos[0], 6)

    def setUp(self):
        self.engine.reset()

    def test_block_beside_the_cache_equals_one_forward(self):
        """Prefill, then pending and block in one step, against the whole committed
        sequence and the block in one forward under the step mask (nothing cached)."""
        e = self.engine
        committed = text(20, 1)
        prefill(e, 0, committed[:14])
        rows = step(e, [0], [committed[14:]], [block_after(committed)], 5, [])
        self.assertEqual(len(rows), BLOCK)
        self.assertEqual(e.pos[0], 20, "the pending tokens are kept, the block is not")
        got = np.stack(e.last_logits)

        ids = committed + block_after(committed)
        positions = np.concatenate((np.arange(20), np.arange(19, 19 + BLOCK)))
        x = e._decoder(1, e._embed(ids), positions, 20, S.step_mask(0, 20, BLOCK))
        want = e._head(x[20:])
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
        for r, (top, probs, _) in zip(want, rows):
            self.assertEqual(top[0], int(np.argmax(r)))
            self.assertEqual(len(top), 5)
            self.assertTrue(all(a >= b for a, b in zip(probs, probs[1:])))

    def test_block_keys_and_values_are_not_kept(self):
        """A block step leaves the cache as a plain prefill does: the next token's row is
        bit for bit a decode's after the same prompt."""
        e = self.engine
        prompt = text(11, 2)
        prefill(e, 0, prompt)
        step(e, [0], [[]], [block_after(prompt)], 3, [])
        prefill(e, 1, prompt)
        tok = 4242
        rows = step(e, [0], [[tok]], [[]], 8, [tok, TEXT_MASK])
        got = e.last_logits[0]
        step(e, [1], [[tok]], [[]], 1, [])
        np.testing.assert_array_equal(got, e.last_logits[0])
        self.assertEqual(e.pos[0], e.pos[1])
        ids, probs, watch = rows[0]
        self.assertEqual(ids[0], int(np.argmax(got)))
        z = np.exp(got - got.max())
        self.assertAlmostEqual(probs[0], float(z[ids[0]] / z.sum()), delta=1e-6)
        self.assertEqual(len(watch), 2)

    def test_pending_without_block_is_the_last_rows_next_token(self):
        e = self.engine
        prompt, more = text(9, 3), text(4, 4)
        prefill(e, 0, prompt)
        step(e, [0], [more], [[]], 2, [])
        got = e.last_logits[0]
        prefill(e, 1, prompt)
        for tok in more:
            step(e, [1], [[tok]], [[]], 1, [])
        np.testing.assert_allclose(got, e.last_logits[0], rtol=2e-5, atol=2e-5)
        self.assertEqual(e.pos[0], len(prompt) + len(more))

    def test_batching_changes_nothing(self):
        e = self.engine
        seqs = [text(10, 5), text(13, 6), text(7, 7)]
        alone = []
        for s in seqs:
            e.reset()
            prefill(e, 0, s[:-3])
            alone.append((step(e, [0], [s[-3:]], [block_after(s)], 4, [TEXT_MASK]), np.stack(e.last_logits)))
        e.reset()
        for slot, s in zip((2, 0, 1), seqs):
            prefill(e, slot, s[:-3])
        together = step(e, [1, 2, 0], [seqs[2][-3:], seqs[0][-3:], seqs[1][-3:]],
                          [block_after(seqs[2]), block_after(seqs[0]), block_after(seqs[1])], 4, [TEXT_MASK])
        logits = np.stack(e.last_logits)
        for i, j in enumerate((2, 0, 1)):
            self.assertEqual(together[i * BLOCK:(i + 1) * BLOCK], alone[j][0])
            np.testing.assert_array_equal(logits[i * BLOCK:(i + 1) * BLOCK], alone[j][1])

    def test_refused_calls_change_nothing(self):
        e = self.engine
        prefill(e, 0, text(8, 8))
        prefill(e, 1, text(8, 9))
        cases = {
            "slot 2 is free: a step on it is its prefill": ([2], [[]], [[1]], 3, []),
            "repeat a slot": ([0, 0], [[1], [1]], [[], []], 3, []),
            "k 0": ([0], [[1]], [[]], 0, []),
            "k 9": ([0], [[1]], [[]], 9, []),
            "17 watched": ([0], [[1]], [[]], 3, [1] * 17),
            "at most 16 of each": ([0], [[1] * 17], [[]], 3, []),
            "one or the other": ([0], [[]], [[]], 3, []),
            "outside the vocabulary": ([1, 0], [[1], [152681]], [[], []], 3, []),
            "slot 3 out of range": ([3], [[1]], [[]], 3, []),
            # images come with a prefill: the image-context id (151665) nowhere else
            "slot 0: the image-context id 151665 .* only a free slot's prompt": ([0], [[151665]], [[]], 3, []),
            "slot 1: the image-context id 151665 .* only a free slot's prompt": ([1], [[]], [[1, 151665]], 3, []),
        }
        for want, args in cases.items():
            with self.subTest(want=want), self.assertRaisesRegex(ValueError, want):
                step(e, *args)
        self.assertEqual(e.pos[:2], [8, 8])
        small = S.open(tiny_config(max_batch=1, max_seq_len=12))
        prefill(small, 0, text(8, 10))
        with self.assertRaisesRegex(ValueError, "slot 0 is full"):
            step(small, [0], [[1, 2, 3]], [[1, 2, 3]], 3, [])  # block rows would reach position 12
        with self.assertRaisesRegex(ValueError, "slot 0 is full"):
            step(small, [0], [[1, 2, 3, 4, 5]], [[]], 3, [])  # 13 positions
        step(small, [0], [[1, 2, 3]], [[1, 2]], 3, [])  # the last block row at position 11
        self.assertEqual(small.pos[0], 11)

    def test_fail_in_step(self):
        e = S.open(tiny_config(max_batch=1, options="fail_in=step\n"))
        prefill(e, 0, text(5, 11))
        with self.assertRaisesRegex(RuntimeError, "told to fail in step"):
            S.step(e, [0], [[1]], [[]], [False], 3, [])


if __name__ == "__main__":
    unittest.main()
