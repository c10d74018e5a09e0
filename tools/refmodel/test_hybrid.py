"""Tests of parallel box decoding (hybrid.py): the masks against a loop over their definition,
the cached step against a whole-sequence recompute, the block rules on hand-made
probability rows, the loop's stop rules, and the committed goldens.

    cd tools/refmodel && /usr/bin/python3 -m unittest -v test_hybrid
"""

import json
import os
import unittest

import torch

import gen_hybrid_goldens as goldens
import hybrid as H
from test_refmodel import random_model

HERE = os.path.dirname(os.path.abspath(__file__))

# Small ids for hand-made rows (the tiny-shapes layout: coordinates 421..1421).
T = H.TokenIds(box_start=416, box_end=417, ref_start=418, ref_end=419, coord_start=421, coord_end=1421,
               none=359, null=1422, im_end=412, text_mask=420)
VOCAB = 1424
FILLER = [7, 8, 9, 10, 11, 12]  # plain text ids to pad a row's ranking with


def c(v):
    """The id of coordinate v."""
    return T.coord_start + v


def rows(*specs):
    """[len(specs), VOCAB] probabilities from {id: p} per row; the rest of each row's mass goes
    to FILLER ids in falling steps, so every top-6 is made of distinct values."""
    out = torch.zeros(len(specs), VOCAB)
    for r, spec in enumerate(specs):
        for i, p in spec.items():
            out[r, i] = p
        rest = 1.0 - sum(spec.values())
        weights = torch.tensor([2.0 ** -k for k in range(len(FILLER))])
        for i, w in zip(FILLER, weights / weights.sum()):
            if i not in spec:
                out[r, i] = rest * float(w)
    return out


def box_rows(x1, y1, x2, y2, p=0.95):
    return rows({T.box_start: 0.9}, {c(x1): p}, {c(y1): p}, {c(x2): p}, {c(y2): p}, {T.box_end: 0.9})


class MaskTest(unittest.TestCase):
    def test_step_mask_against_its_definition(self):
        for n_cached, n_pending, block in ((0, 5, 6), (7, 1, 6), (7, 3, 6), (4, 2, 0), (0, 4, 0)):
            m = H.step_mask(n_cached, n_pending, block)
            rows_, cols = n_pending + block, n_cached + n_pending + block
            self.assertEqual(tuple(m.shape), (rows_, cols))
            last_committed = n_cached + n_pending - 1
            for r in range(rows_):
                for j in range(cols):
                    if r < n_pending:  # a pending committed token: plain causal, no block columns
                        want = j <= n_cached + r
                    else:  # a block row: every committed token but the last, and the whole block
                        want = (j < n_cached + n_pending and j != last_committed) or j >= n_cached + n_pending
                    self.assertEqual(bool(m[r, j]), want, (n_cached, n_pending, block, r, j))

    def test_training_mask_rows_are_the_step_mask_rows(self):
        x0, slot0 = 20, [11, 14, 19]
        m = H.training_mask(x0, slot0, 6)
        self.assertTrue(torch.equal(m[:x0, :x0], torch.ones(x0, x0, dtype=torch.bool).tril()))
        self.assertFalse(m[:x0, x0:].any())  # the clean sequence never sees a block
        for k, p in enumerate(slot0):
            r = x0 + 6 * k
            # The same block at inference: tokens 0..p committed and cached, nothing pending.
            step = H.step_mask(p + 1, 0, 6)
            self.assertTrue(torch.equal(m[r:r + 6, :p + 1], step[:, :p + 1]))
            self.assertTrue(m[r:r + 6, r:r + 6].all())
            self.assertFalse(m[r:r + 6, p + 1:r].any())
            self.assertFalse(m[r:r + 6, r + 6:].any())


class ForwardTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(3)
        self.model = random_model("tiny-f32")
        self.t = H.TokenIds.from_config(self.model.cfg)
        self.emb = torch.randn(4, self.model.cfg.text.hidden)
        img = self.model.cfg.image_token_id
        self.prompt = [5, 17, img, img, img, img, 33, 2048, 99]

    def test_cached_steps_equal_recompute(self):
        """Three block steps through the cache (pending = prompt, then 4, then 2 tokens)
        give the block rows a whole-sequence forward under step_mask gives."""
        cache = H.KVCache(self.model.cfg.text.layers)
        committed = list(self.prompt)
        for new in ([301, 302, 303, 304], [305, 306], [307]):
            n_cached, L = len(cache), len(committed)
            pending = committed[n_cached:]
            ids = pending + [committed[-1]] + [self.t.text_mask] * 5
            got = H.forward_step(self.model, cache, ids, list(range(n_cached, L)) + H.block_positions(L - 1, 6),
                                 H.step_mask(n_cached, len(pending), 6), keep=len(pending),
                                 image_embeds=self.emb)[-6:]
            want = H.block_logits_recompute(self.model, committed, self.emb, self.t)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            self.assertEqual(len(cache), L)  # the pending tokens are kept, the block is not
            committed += new

    def test_prefill_then_block_equals_one_forward(self):
        """What an engine does (prefill, then the block alone against the cache) equals
        upstream's first step (prompt and block in one forward)."""
        L = len(self.prompt)
        block = [self.prompt[-1]] + [self.t.text_mask] * 5
        together = H.forward_step(self.model, H.KVCache(3), self.prompt + block,
                                  list(range(L)) + H.block_positions(L - 1, 6), H.step_mask(0, L, 6), keep=L,
                                  image_embeds=self.emb)[-6:]
        cache = H.KVCache(3)
        H.forward_step(self.model, cache, self.prompt, list(range(L)), H.step_mask(0, L, 0), keep=L,
                       image_embeds=self.emb)
        alone = H.forward_step(self.model, cache, block, H.block_positions(L - 1, 6), H.step_mask(L, 0, 6), keep=0)
        torch.testing.assert_close(alone, together, rtol=1e-5, atol=1e-5)

    def test_slow_mode_is_greedy(self):
        gen = H.generate(self.model, self.prompt, self.emb, 12, mode="slow")
        greedy, _, _ = self.model.greedy(torch.tensor(self.prompt), self.emb, 12)
        want = greedy[:greedy.index(self.t.im_end) + 1] if self.t.im_end in greedy else greedy
        self.assertEqual(gen.tokens, want)
        self.assertTrue(all(s["kind"] == "ar" for s in gen.steps))

    def test_budget_cuts_the_last_block(self):
        full = H.generate(self.model, self.prompt, self.emb, 40, mode="hybrid")
        for budget in (1, 5, 7):
            gen = H.generate(self.model, self.prompt, self.emb, budget, mode="hybrid")
            self.assertEqual(gen.tokens, full.tokens[:budget])
        tail = H.generate(self.model, self.prompt, self.emb, 5, mode="hybrid", upstream_tail=True)
        self.assertEqual(tail.tokens, full.tokens[:len(tail.tokens)])
        self.assertGreaterEqual(len(tail.tokens), 5)


class BlockRuleTest(unittest.TestCase):
    def choose(self, probs, mode="hybrid"):
        ch = H.read_block(probs, T, mode)
        return ch, H.handle_pattern(ch.new_tokens, T, mode)

    def test_clean_box_is_one_step(self):
        ch, pat = self.choose(box_rows(100, 200, 300, 400))
        self.assertEqual((ch.path, pat.type), ("box", "coord_box"))
        self.assertEqual(pat.tokens, [T.box_start, c(100), c(200), c(300), c(400), T.box_end])

    def test_box_reading_ignores_row_zero(self):
        """decode_bbox_avg does not look at row 0: a frame whose rows 1-4 hold coordinates and
        whose row 5 ends a box commits <box>.. even when row 0 prefers another token."""
        p = box_rows(100, 200, 300, 400)
        p[0] = rows({T.ref_start: 0.9})[0]
        ch, pat = self.choose(p)
        self.assertEqual((ch.path, pat.type, pat.tokens[0]), ("box", "coord_box", T.box_start))

    def test_near_neighbours_are_not_abnormal(self):
        p = box_rows(100, 200, 300, 400, p=0.4)
        p[1] = rows({c(100): 0.4, c(110): 0.3, c(90): 0.2})[0]  # spread 20 <= 60
        _, pat = self.choose(p)
        self.assertEqual(pat.type, "coord_box")

    def test_abnormal_spread_falls_back_to_ar(self):
        p = box_rows(100, 200, 300, 400)
        p[3] = rows({c(300): 0.5, c(700): 0.4})[0]  # x2 torn between 300 and 700
        ch, pat = self.choose(p)
        self.assertEqual(ch.new_tokens, [T.box_start, c(100), c(200), H.REJECTED, c(400), T.box_end])
        self.assertEqual((pat.type, pat.tokens, pat.to_ar), ("error_box", [T.box_start, c(100), c(200)], True))
        self.assertTrue(ch.box["rows"][2]["abnormal"])
        # fast mode has no abnormal rule.
        _, fast = self.choose(p, "fast")
        self.assertEqual((fast.type, fast.tokens[3]), ("coord_box", c(300)))

    def test_confident_spread_is_not_abnormal(self):
        p = box_rows(100, 200, 300, 400)
        p[3] = rows({c(300): 0.92, c(700): 0.05})[0]  # p >= 0.9: accepted despite the spread
        _, pat = self.choose(p)
        self.assertEqual(pat.type, "coord_box")

    def test_empty_box(self):
        p = rows({T.box_start: 0.8}, {T.none: 0.5}, {T.box_end: 0.5}, {T.null: 0.3}, {T.null: 0.3}, {T.null: 0.9})
        ch, pat = self.choose(p)
        self.assertEqual(ch.new_tokens, [T.box_start, T.none, T.box_end, T.null, T.null, T.null])
        self.assertEqual((ch.path, pat.type, pat.tokens), ("empty_box", "empty_box", [T.box_start, T.none, T.box_end]))
        # Below the <box> threshold the empty test is skipped; argmax still reads <box>None.
        p[0] = rows({T.box_start: 0.65})[0]
        ch, pat = self.choose(p)
        self.assertEqual((ch.path, pat.type), ("argmax", "empty_box"))

    def test_label_block(self):
        red, circle = 500 - 480, 30  # two plain text ids
        p = rows({T.ref_start: 0.9}, {red: 0.9}, {circle: 0.9}, {T.ref_end: 0.9}, {T.null: 0.9}, {T.null: 0.9})
        ch, pat = self.choose(p)
        self.assertEqual((ch.box["frame"], ch.path), ("legal_box", "ref"))  # row 5 <null>: passes as a frame
        self.assertEqual(pat.type, "ref_object")
        self.assertEqual(pat.tokens, [T.ref_start, red, circle, T.ref_end])

    def test_label_rows_with_coordinates_in_their_tail_read_as_a_box(self):
        """The reason for the text smoothing of tools/tinymodel/train.py's block loss."""
        red, circle = 20, 30
        p = rows({T.ref_start: 0.9}, {red: 0.85, c(10): 0.06}, {circle: 0.85, c(500): 0.06},
                 {T.ref_end: 0.85, c(990): 0.06}, {T.null: 0.85, c(40): 0.06}, {T.null: 0.9})
        ch, pat = self.choose(p)
        self.assertEqual(ch.path, "box")
        self.assertEqual(pat.type, "coord_box")

    def test_end_block(self):
        p = rows({T.im_end: 0.9}, *[{T.null: 0.9}] * 5)
        _, pat = self.choose(p)
        self.assertEqual((pat.type, pat.tokens, pat.terminal), ("im_end", [T.im_end], True))
        p = rows(*[{T.null: 0.9}] * 6)
        _, pat = self.choose(p)
        self.assertEqual((pat.type, pat.tokens), ("im_end", [T.im_end]))

    def test_point_block(self):
        p = rows({T.box_start: 0.9}, {c(310): 0.9}, {c(730): 0.9}, {T.box_end: 0.9}, {T.null: 0.9}, {T.null: 0.9})
        ch, pat = self.choose(p)
        self.assertEqual((ch.path, pat.type, pat.tokens), ("argmax", "point_box", [T.box_start, c(310), c(730), T.box_end]))

    def test_handle_pattern_text_rules(self):
        r = H.handle_pattern([5, T.ref_end, T.ref_end, 6, 7, 8], T)
        self.assertEqual(r.tokens, [5, T.ref_end, T.ref_end, 6, 7, 8])
        r = H.handle_pattern([5, T.ref_end, T.ref_end, T.null, 7, 8], T)
        self.assertEqual(r.tokens, [5, T.ref_end])
        r = H.handle_pattern([T.box_start, c(1), 5, c(2), c(3), T.box_end], T)
        self.assertEqual((r.type, r.tokens), ("error_box", [T.box_start, c(1)]))

    def test_ar_kinds(self):
        self.assertEqual(H.classify_ar(T.box_end, T), "box_end_ar")
        self.assertEqual(H.classify_ar(c(5), T), "coord_ar")
        self.assertEqual(H.classify_ar(T.none, T), "coord_ar")
        self.assertEqual(H.classify_ar(T.ref_start, T), "im_end")  # hybrid AR only finishes boxes
        self.assertEqual(H.classify_ar(T.ref_start, T, "slow"), "continue_ar")
        self.assertEqual(H.classify_ar(T.im_end, T, "slow"), "im_end")

    def test_ties_go_to_the_lower_id(self):
        row = torch.zeros(VOCAB)
        row[[900, 450, 700]] = 0.3
        self.assertEqual(H.ranked(row, 3)[1].tolist(), [450, 700, 900])


class AnswerBlocksTest(unittest.TestCase):
    def test_layout(self):
        n = T.null
        ans = [T.ref_start, 20, 30, T.ref_end, T.box_start, c(1), c(2), c(3), c(4), T.box_end,
               T.box_start, T.none, T.box_end, T.box_start, c(5), c(6), T.box_end,
               T.ref_start, 1, 2, 3, 4, 5, 6, T.ref_end, T.im_end]
        got = H.answer_blocks(ans, T)
        self.assertEqual(got, [
            (0, [T.ref_start, 20, 30, T.ref_end, n, n]),
            (4, [T.box_start, c(1), c(2), c(3), c(4), T.box_end]),
            (10, [T.box_start, T.none, T.box_end, n, n, n]),
            (13, [T.box_start, c(5), c(6), T.box_end, n, n]),
            (17, [T.ref_start, 1, 2, 3, 4, 5]),
            (23, [6, T.ref_end, n, n, n, n]),
            (25, [T.im_end, n, n, n, n, n]),
        ])


class DecisionGoldensTest(unittest.TestCase):
    def test_decisions_file_reproduces(self):
        with open(os.path.join(goldens.OUT_DIR, "decisions.json")) as f:
            self.assertEqual(json.load(f), goldens.decision_cases())


class CheckpointGoldensTest(unittest.TestCase):
    def test_random_checkpoint_goldens_reproduce(self):
        for name in ("tiny-bf16", "tiny-f32"):
            with open(os.path.join(goldens.OUT_DIR, f"{name}.json")) as f:
                committed = json.load(f)
            self.assertEqual(goldens.checkpoint_goldens(name), committed, name)

    def test_block_model_goldens_reproduce_and_accept_boxes(self):
        with open(os.path.join(goldens.OUT_DIR, "tiny-shapes-blocks.json")) as f:
            committed = json.load(f)
        self.assertEqual(goldens.shapes_goldens(), committed)
        # The block-trained model really writes boxes in one step, and falls back to AR too.
        steps = [s for r in committed["runs"] for s in r["steps"]]
        kinds = {s["type"] for s in steps}
        for want in ("ref_object", "coord_box", "empty_box", "point_box", "error_box", "coord_ar", "box_end_ar", "im_end"):
            self.assertIn(want, kinds)
        t = goldens.totals(committed)
        self.assertGreater(t["boxes_in_one_step"], t["boxes"] / 2)
        self.assertLess(t["forwards"], t["slow_forwards"])

    def test_bundled_model_goldens_reproduce_and_accept_boxes(self):
        with open(os.path.join(goldens.OUT_DIR, "tiny-shapes.json")) as f:
            committed = json.load(f)
        self.assertEqual(goldens.shapes_goldens(goldens.BUNDLED_MODEL), committed)
        # The bundled model (block-trained too) writes boxes, empties and points in one step,
        # falls back to AR on torn coordinates, and ends every run with a clean end block.
        steps = [s for r in committed["runs"] for s in r["steps"]]
        kinds = {s["type"] for s in steps}
        for want in ("ref_object", "coord_box", "empty_box", "point_box", "error_box", "coord_ar", "box_end_ar", "im_end"):
            self.assertIn(want, kinds)
        self.assertEqual(sum(s["type"] == "im_end" for s in steps), len(committed["runs"]))
        t = goldens.totals(committed)
        self.assertGreater(t["boxes_in_one_step"], t["boxes"] / 2)
        self.assertLess(t["forwards"], t["slow_forwards"] / 2)


if __name__ == "__main__":
    unittest.main()
