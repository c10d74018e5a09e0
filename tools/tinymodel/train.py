#!/usr/bin/python3
"""Trains the tiny LocateAnything on freshly generated shape scenes and writes the
checkpoint directory (weights in the real layout, config files, tokenizer files).

    train.py --tokenizer models/tiny-shapes --out models/tiny-shapes --steps 3000

Seeded: the same arguments on the same torch build give the same weights (the scene
stream, the initialisation and the batch order all come from --seed). Every --save-every
steps the current weights are written to --out, so a run cut short still leaves a usable
model; --state keeps the optimizer too, and --resume continues from it.
"""

import argparse
import math
import multiprocessing as mp
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import scenes  # noqa: E402
import tinyla  # noqa: E402
from tinyla import hybrid, refmodel  # noqa: E402

IGNORE = -100
ATTENTION_LAYER = 1  # decoder layer whose first heads are taught where to look
EMBED_PENALTY = 0.01  # times the mean square of the image embeddings (see loss_fn)
COORD_SIGMA = 6.0  # coordinate units (per mille) of the soft target around the true value
SOFT_WEIGHT = 0.5
# Block rows whose target is not a coordinate spread this much of their target over the
# non-coordinate vocabulary (see block_loss).
TEXT_SMOOTHING = 0.05
BOX_TOP_K = 4  # hybrid.BOX_TOP_K: a box row's coordinate is looked for among its top 4


def batch_rng(seed, step):
    """Each step's scenes come from their own generator, so a resumed run sees the same
    batches as an uninterrupted one."""
    return random.Random(seed * 1_000_003 + step)


def produce(tok_dir, seed, start, steps, batch_size, coord_step, present_prob, blocks, queue):
    """Runs in a child process: makes the batches of steps start..steps-1, in order."""
    torch.set_num_threads(1)
    tok = bpe.Tokenizer.load(tok_dir)
    ids = block_token_ids(tok) if blocks else None
    for step in range(start, steps):
        # numpy arrays travel by value; torch tensors would be shared through file
        # descriptors that vanish when this process ends before the trainer reads them.
        batch = make_batch(batch_rng(seed, step), tok, batch_size, coord_step, present_prob, ids)
        queue.put(tuple(x.numpy() if torch.is_tensor(x) else x for x in batch))


def block_token_ids(tok):
    """The ids parallel box decoding reads (tools/refmodel/hybrid.py), from the tokenizer."""
    return hybrid.TokenIds(
        box_start=tok.id("<box>"), box_end=tok.id("</box>"), ref_start=tok.id("<ref>"), ref_end=tok.id("</ref>"),
        coord_start=tok.id("<0>"), coord_end=tok.id("<1000>"), none=tok.id("None"), null=tok.id("<null>"),
        im_end=tok.id("<|im_end|>"), text_mask=tok.id("<text_mask>"))


AUX_CLASSES = len(scenes.COLOURS) + 1 + len(scenes.SHAPES) + 1  # colour or none, shape or none


def cell_labels(scene, gh, gw, k=2):
    """Training-only targets for each image token (one per k x k patch cell, raster order):
    the colour and shape of the object covering the cell's centre (the core of its box),
    or the extra 'background' class, and that object's box (x1, y1, x2, y2 over the image
    size; zeros for background). Later objects are drawn on top, so they win."""
    w, h = scene.size
    rows, cols = gh // k, gw // k
    colours, shapes = list(scenes.COLOURS), list(scenes.SHAPES)
    colour = [len(colours)] * (rows * cols)
    shape = [len(shapes)] * (rows * cols)
    box = [[0.0, 0.0, 0.0, 0.0] for _ in range(rows * cols)]
    for o in scene.objects:
        x1, y1, x2, y2 = o.box
        mx, my = 0.2 * (x2 - x1), 0.2 * (y2 - y1)
        for r in range(rows):
            cy = (r + 0.5) / rows * h
            if not (y1 + my <= cy <= y2 - my):
                continue
            for c in range(cols):
                cx = (c + 0.5) / cols * w
                if x1 + mx <= cx <= x2 - mx:
                    colour[r * cols + c] = colours.index(o.colour)
                    shape[r * cols + c] = shapes.index(o.shape)
                    box[r * cols + c] = [x1 / w, y1 / h, x2 / w, y2 / h]
    return colour, shape, box


def answer_objects(scene, task, query):
    """The objects whose boxes (or points) the answer lists, in the answer's order."""
    if task == "ground_one":
        word, _, cat = query[len("the "):].partition(" ")
        target = scenes.superlative_target(scene, word, cat)
        return [] if target in (None, False) else [target]
    if task == "ground":
        query = scenes.phrase_category(query)
    out = []
    for cat in query.split("</c>"):
        out += scenes.in_reading_order([o for o in scene.objects if scenes.matches(o, cat)])
    return out


def object_cells(obj, size, gh, gw, k=2):
    """Indices of the image tokens (k x k patch cells, raster order) an object's box overlaps
    by at least a third of a cell in each direction; at least the cell of its centre."""
    w, h = size
    rows, cols = gh // k, gw // k
    x1, y1, x2, y2 = obj.box[0] / w * cols, obj.box[1] / h * rows, obj.box[2] / w * cols, obj.box[3] / h * rows
    cells = [r * cols + c for r in range(rows) for c in range(cols)
             if min(c + 1, x2) - max(c, x1) >= 1 / 3 and min(r + 1, y2) - max(r, y1) >= 1 / 3]
    if not cells:
        cx, cy = min(cols - 1, int((x1 + x2) / 2)), min(rows - 1, int((y1 + y2) / 2))
        cells = [cy * cols + cx]
    return cells


def coordinate_cells(tok, scene, task, query, answer_ids, gh, gw, image_start):
    """{answer index of a coordinate: [sequence indices of the image tokens of its box's
    object]}, for every coordinate of an answer box."""
    objs = answer_objects(scene, task, query)
    box_start = tok.id("<box>")
    c0, c1 = tok.id("<0>"), tok.id("<1000>")
    out, k = {}, -1
    for i, t in enumerate(answer_ids):
        if t == box_start:
            # Note: a <box>None</box> advances k too, so after one the later boxes are paired
            # with the object before theirs. Kept as it is: the shipped model was trained so.
            k += 1
        elif c0 <= t <= c1 and 0 <= k < len(objs):
            out[i] = [image_start + c for c in object_cells(objs[k], scene.size, gh, gw)]
    return out


def attention_targets(cells, prompt_len, blocks, x0_len):
    """[(position, [sequence indices of the image tokens to attend to])]: the positions that
    predict a coordinate of an answer box, each paired with the image tokens of that box's
    object: in the next-token stream the position before the coordinate, in a block the row
    whose target it is. Used to supervise one decoder attention layer (see attention_loss)."""
    out = [(prompt_len + i - 1, c) for i, c in cells.items()]
    for k, (start, targets) in enumerate(blocks):
        for r in range(len(targets)):
            if start + r in cells:
                out.append((x0_len + 6 * k + r, cells[start + r]))
    return out


def make_batch(rng, tok, batch_size, coord_step=1, present_prob=0.75, block_ids=None):
    """One batch of scenes of one image size (so one vision grid): patches [B, L, 3, 14, 14],
    the grid, ids [B, S] right-padded, targets [B, S] (IGNORE outside the answers), the
    per-image-token colour and shape classes [B, N] of cell_labels, the attention targets,
    and for the block objective (block_ids given; else None each) positions [B, S], the
    attention mask [B, S, S] and the block rows [B, S].

    With blocks, each row is the training layout of parallel box decoding (upstream
    create_block_diff_mask_by_pe_4d; tools/refmodel/hybrid.py, training_mask): the clean
    sequence (prompt + answer, learned by next-token prediction as before), then one block
    per answer block (hybrid.answer_blocks): [the token before the block's first target,
    <text_mask> x 5] at that token's position and the five after it, whose six rows learn
    the block's six targets at once."""
    size = scenes.random_size(rng)
    patches, rows, cell_colour, cell_shape, cell_box, attn = [], [], [], [], [], []
    for _ in range(batch_size):
        scene = scenes.make_scene(rng, size=size)
        task, query, answer = scenes.make_query(rng, scene, step=coord_step, present_prob=present_prob)
        p, gh, gw = tinyla.prepare_image(scene.image)
        patches.append(p)
        cc, cs, cb = cell_labels(scene, gh, gw)
        cell_colour.append(cc)
        cell_shape.append(cs)
        cell_box.append(cb)
        n_img = gh * gw // 4
        prompt = tinyla.prompt_ids(tok, task, query, n_img)
        ans = tinyla.answer_ids(tok, answer)
        blocks = hybrid.answer_blocks(ans, block_ids) if block_ids else []
        rows.append((prompt, ans, blocks))
        image_start = prompt.index(tok.id("<IMG_CONTEXT>"))
        cells = coordinate_cells(tok, scene, task, query, ans, gh, gw, image_start)
        attn.append(attention_targets(cells, len(prompt), blocks, len(prompt) + len(ans)))
    S = max(len(p) + len(a) + 6 * len(b) for p, a, b in rows)
    pad = tok.id("<|endoftext|>")
    ids = torch.full((batch_size, S), pad, dtype=torch.long)
    targets = torch.full((batch_size, S), IGNORE, dtype=torch.long)
    positions = allowed = block_rows = None
    if block_ids:
        positions = torch.zeros(batch_size, S, dtype=torch.long)
        allowed = torch.eye(S, dtype=torch.bool).repeat(batch_size, 1, 1)  # padding rows read themselves
        block_rows = torch.zeros(batch_size, S, dtype=torch.bool)
    for i, (p, a, blocks) in enumerate(rows):
        seq = p + a
        ids[i, :len(seq)] = torch.tensor(seq)
        # Position t predicts token t+1: only the answer tokens are learned.
        targets[i, len(p) - 1:len(seq) - 1] = torch.tensor(a)
        if not block_ids:
            continue
        x0 = len(seq)
        positions[i, :x0] = torch.arange(x0)
        slot0 = [len(p) + start - 1 for start, _ in blocks]
        for k, (start, block_targets) in enumerate(blocks):
            r = x0 + 6 * k
            ids[i, r:r + 6] = torch.tensor([seq[slot0[k]]] + [block_ids.text_mask] * 5)
            positions[i, r:r + 6] = torch.tensor(hybrid.block_positions(slot0[k], 6))
            targets[i, r:r + 6] = torch.tensor(block_targets)
            block_rows[i, r:r + 6] = True
        n = x0 + 6 * len(blocks)
        allowed[i, :n, :n] = hybrid.training_mask(x0, slot0, 6)
    return (torch.stack(patches), gh, gw, ids, targets, torch.tensor(cell_colour), torch.tensor(cell_shape),
            torch.tensor(cell_box), attention_mask(attn, S), positions, allowed, block_rows)


def attention_mask(attn, S):
    """[B, S, S] float: row t of sample b marks the image tokens that position t should
    attend to (all zero where t is not supervised)."""
    m = torch.zeros(len(attn), S, S)
    for b, pairs in enumerate(attn):
        for t, cols in pairs:
            m[b, t, cols] = 1.0
    return m


def attention_loss(probs, mask, heads=2):
    """-log of the attention mass that the first `heads` heads of the supervised layer put
    on the answer box's object, at each position that predicts one of its coordinates. It
    teaches the decoder where to look; without it the selection was not found in 1000 steps."""
    rows = mask.sum(-1) > 0  # [B, S]
    if not rows.any():
        return probs.sum() * 0
    mass = (probs[:, :heads] * mask[:, None]).sum(-1)  # [B, heads, S]
    return -torch.log(mass.permute(0, 2, 1)[rows] + 1e-6).mean()


class AuxHead(torch.nn.Module):
    """Training-only probe on the image embeddings (the decoder's input): per image token,
    its colour, its shape, its position in the image and the box of the object on it. It gives the vision tower a direct
    signal from the first step; without it the decoder learned to ignore the image (the
    answer's first coordinates never left the prior in 1000 steps). Not saved."""

    def __init__(self, hidden):
        super().__init__()
        self.proj = torch.nn.Linear(hidden, AUX_CLASSES + 2 + 4)

    def loss(self, image_embeds, colour, shape, box, grid_h, grid_w, k=2):
        out = self.proj(image_embeds)  # [B, N, classes + centre + box]
        nc = len(scenes.COLOURS) + 1
        l_colour = F.cross_entropy(out[..., :nc].flatten(0, 1), colour.flatten())
        l_shape = F.cross_entropy(out[..., nc:AUX_CLASSES].flatten(0, 1), shape.flatten())
        rows, cols = grid_h // k, grid_w // k
        cy = ((torch.arange(rows, dtype=torch.float32) + 0.5) / rows).repeat_interleave(cols)
        cx = ((torch.arange(cols, dtype=torch.float32) + 0.5) / cols).repeat(rows)
        centre = torch.stack((cx, cy), -1)[None].expand(out.shape[0], -1, -1)
        l_pos = F.mse_loss(out[..., AUX_CLASSES:AUX_CLASSES + 2], centre) * 10
        on_object = (shape < len(scenes.SHAPES)).float()[..., None]
        l_box = ((out[..., AUX_CLASSES + 2:] - box) ** 2 * on_object).sum() / on_object.sum().clamp(min=1) * 10 / 4
        return l_colour + l_shape + l_pos + l_box


def loss_fn(logits, targets, c0, c1, sigma=COORD_SIGMA, soft_weight=SOFT_WEIGHT, coord_step=1):
    """Cross-entropy on the answer tokens, plus a soft cross-entropy that spreads each
    coordinate target over its neighbours (a Gaussian of COORD_SIGMA), so being close counts."""
    V = logits.shape[-1]
    flat, tgt = logits.reshape(-1, V), targets.reshape(-1)  # any shape, as long as they pair up
    hard = F.cross_entropy(flat, tgt, ignore_index=IGNORE)
    is_coord = (tgt >= c0) & (tgt <= c1)
    if not is_coord.any():
        return hard, hard
    logp = F.log_softmax(flat[is_coord], dim=-1)[:, c0:c1 + 1]
    values = torch.arange(c1 - c0 + 1, dtype=torch.float32)
    true = (tgt[is_coord] - c0).float()
    weights = torch.exp(-0.5 * ((values[None] - true[:, None]) / sigma) ** 2)
    weights = weights * (values % coord_step == 0)[None]  # only values the answers use
    weights = weights / weights.sum(-1, keepdim=True)
    soft = -(weights * logp).sum(-1).mean()
    return hard + soft_weight * soft, hard


def block_loss(logits, targets, c0, c1, sigma, soft_weight, coord_step):
    """The block objective on the block rows: the same cross-entropy and soft coordinate
    target as the next-token rows, plus, on rows whose target is not a coordinate (labels,
    </box>, <null>, <|im_end|>), TEXT_SMOOTHING of the target spread over the
    non-coordinate vocabulary. Hybrid decoding reads a block as a box whenever rows 1-4 each
    hold a coordinate among their top 4 (hybrid.decode_bbox_avg); in this vocabulary, seven
    tokens in ten are coordinates, so an unsmoothed label row's tail is full of them."""
    loss, hard = loss_fn(logits, targets, c0, c1, sigma, soft_weight, coord_step)
    text = (targets < c0) | (targets > c1)
    if text.any():
        non_coord = torch.ones(logits.shape[-1], dtype=torch.bool)
        non_coord[c0:c1 + 1] = False
        logp = F.log_softmax(logits[text], dim=-1)[:, non_coord]
        loss = loss + TEXT_SMOOTHING * -logp.mean()
    return loss, hard


def coordinate_margin(logits, targets, c0, c1, margin, k=BOX_TOP_K):
    """Hinge on the block rows whose target is not a coordinate: the row's best coordinate
    logit should sit at least `margin` below its k-th best non-coordinate logit, so that no
    coordinate is among the row's top k. That is the condition hybrid decoding's box reading
    tests (hybrid.decode_bbox_avg: rows 1-4 each need a coordinate in their top 4, or the
    block is not a box), so an end or label block that meets it can never be read as a box.
    Returns (mean hinge, share of those rows that still hold a coordinate in their top k)."""
    text = (targets < c0) | (targets > c1)
    if not text.any():
        return logits.sum() * 0, 0.0
    rows = logits[text]
    best_coord = rows[:, c0:c1 + 1].max(-1).values
    non_coord = torch.cat((rows[:, :c0], rows[:, c1 + 1:]), -1)
    kth_text = non_coord.topk(k, -1).values[:, -1]
    gap = best_coord - kth_text
    return F.relu(gap + margin).mean(), float((gap > 0).float().mean())


def distill_loss(student, teacher):
    """KL(teacher || student) per row, averaged: keeps the one-token rows' whole distribution
    where the starting checkpoint had it (the None-against-coordinate balance that greedy
    decoding reads is a property of the distribution, not of the argmax alone)."""
    logq = F.log_softmax(teacher, -1)
    return (logq.exp() * (logq - F.log_softmax(student, -1))).sum(-1).mean()


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="directory with the BPE files (build_tokenizer.py)")
    ap.add_argument("--out", required=True, help="checkpoint directory to write")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--coord-sigma", type=float, default=COORD_SIGMA,
                    help="width of the soft coordinate target; a second, sharpening phase uses less")
    ap.add_argument("--coord-step", type=int, default=1,
                    help="round answer coordinates to multiples of this (10: 101 values to choose from)")
    ap.add_argument("--present-prob", type=float, default=0.75,
                    help="chance that a queried category is in the scene; lower it to make greedy decoding "
                         "answer None less readily (see README)")
    ap.add_argument("--size", choices=sorted(tinyla.SIZES), default="small", help="model width and depth")
    ap.add_argument("--soft-weight", type=float, default=SOFT_WEIGHT, help="weight of the soft coordinate loss")
    ap.add_argument("--attention-weight", type=float, default=1.0, help="weight of attention_loss")
    ap.add_argument("--aux-weight", type=float, default=1.0, help="weight of the image-token probe loss (AuxHead)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the trainer (a second process makes the scenes); on a "
                         "shared, loaded machine 1 is much faster than 2")
    ap.add_argument("--save-every", type=int, default=250, help="steps between checkpoint writes")
    ap.add_argument("--state", default="", help="file for the resumable training state (model + optimizer)")
    ap.add_argument("--resume", action="store_true", help="continue from --state")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="stop (and save) after this step, keeping the schedule of --steps")
    ap.add_argument("--max-minutes", type=float, default=0, help="stop (and save) after this much wall time")
    ap.add_argument("--init", default="",
                    help="start from this checkpoint's weights (a fine-tune) instead of a fresh initialisation")
    ap.add_argument("--block-weight", type=float, default=0.0,
                    help="weight of the parallel box decoding objective (block_loss); 0 leaves it out")
    ap.add_argument("--margin-weight", type=float, default=0.0,
                    help="weight of coordinate_margin on block rows whose target is not a coordinate; 0 leaves it out")
    ap.add_argument("--margin", type=float, default=1.0,
                    help="logits by which a non-coordinate block row's best coordinate must trail its 4th best other")
    ap.add_argument("--ar-weight", type=float, default=1.0, help="weight of the next-token (one-token) loss")
    ap.add_argument("--distill-weight", type=float, default=0.0,
                    help="weight of distill_loss: KL from the --init checkpoint's next-token distribution on the "
                         "one-token rows (needs --init); 0 leaves it out")
    ap.add_argument("--freeze-vision", action="store_true",
                    help="train the decoder only (the vision tower and projector keep their weights)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tok = bpe.Tokenizer.load(args.tokenizer)
    cfg = tinyla.make_config(tok, args.size)
    model = refmodel.LocateAnything(cfg, lm_head=False)
    tinyla.init_weights(model, tok, args.seed)
    if args.init:
        model.load_state_dict(refmodel.load_checkpoint(args.init).state_dict())
    teacher = None
    if args.distill_weight > 0:
        if not args.init:
            ap.error("--distill-weight needs --init")
        teacher = refmodel.load_checkpoint(args.init)
        teacher.eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
    if args.freeze_vision:
        for p in list(model.vision_model.parameters()) + list(model.mlp1.parameters()):
            p.requires_grad_(False)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in trainable if p.dim() >= 2 and not n.endswith("embed_tokens.weight")]
    other = [p for n, p in trainable if not (p.dim() >= 2 and not n.endswith("embed_tokens.weight"))]
    aux = AuxHead(cfg.text.hidden) if args.aux_weight > 0 else None
    groups = [{"params": decay, "weight_decay": 0.05}, {"params": other, "weight_decay": 0.0}]
    if aux is not None:
        groups.append({"params": list(aux.parameters()), "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98))
    start_step = 0
    if args.resume:
        state = torch.load(args.state)
        model.load_state_dict(state["model"])
        if aux is not None:
            aux.load_state_dict(state["aux"])
        opt.load_state_dict(state["opt"])
        start_step = state["step"]
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params}; vocab {cfg.text.vocab}; steps {start_step}..{args.steps}", flush=True)

    def save(step):
        tinyla.save(model, tok, args.out)
        if args.state:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "aux": aux.state_dict() if aux is not None else None}, args.state + ".tmp")
            os.replace(args.state + ".tmp", args.state)

    c0, c1 = cfg.coord_start_token_id, cfg.coord_end_token_id
    model.train()
    ctx = mp.get_context("fork")
    queue = ctx.Queue(maxsize=6)
    producer = ctx.Process(target=produce, args=(args.tokenizer, args.seed, start_step, args.steps, args.batch,
                                                   args.coord_step, args.present_prob, args.block_weight > 0, queue),
                           daemon=True)
    producer.start()
    try:
        train_loop(args, model, aux, opt, queue, start_step, save, c0, c1, teacher)
    finally:
        producer.terminate()
        producer.join()


def train_loop(args, model, aux, opt, queue, start_step, save, c0, c1, teacher=None):
    t0, avg, avg_hard, avg_block = time.time(), None, None, None
    avg_margin = avg_open = avg_kl = None
    for step in range(start_step, args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        (patches, gh, gw, ids, targets, cell_colour, cell_shape, cell_box, attn_mask, positions, allowed,
         block_rows) = (torch.from_numpy(x) if hasattr(x, "dtype") else x for x in queue.get())
        where = targets != IGNORE
        mask = None if allowed is None else allowed[:, None]
        if args.attention_weight > 0:
            logits, image_embeds, probs = tinyla.forward_batch_attention(model, patches, gh, gw, ids, where,
                                                                         ATTENTION_LAYER, positions, mask)
        else:
            logits, image_embeds = tinyla.forward_batch(model, patches, gh, gw, ids, where, return_image_embeds=True,
                                                        positions=positions, allowed=mask)
        in_block = torch.zeros(int(where.sum()), dtype=torch.bool) if block_rows is None else block_rows[where]
        loss, hard = loss_fn(logits[~in_block], targets[where][~in_block], c0, c1, args.coord_sigma,
                             args.soft_weight, args.coord_step)
        loss = args.ar_weight * loss
        block_hard = margin = still_open = kl = None
        if in_block.any():
            b_loss, block_hard = block_loss(logits[in_block], targets[where][in_block], c0, c1, args.coord_sigma,
                                            args.soft_weight, args.coord_step)
            loss = loss + args.block_weight * b_loss
            if args.margin_weight > 0:
                margin, still_open = coordinate_margin(logits[in_block], targets[where][in_block], c0, c1,
                                                       args.margin)
                loss = loss + args.margin_weight * margin
        if teacher is not None:
            with torch.no_grad():
                t_logits = tinyla.forward_batch(teacher, patches, gh, gw, ids, where, positions=positions,
                                                allowed=mask)
            kl = distill_loss(logits[~in_block], t_logits[~in_block])
            loss = loss + args.distill_weight * kl
        # Without this the projector learns one huge constant vector for every image token
        # (seen: std 42, varying by 0.2 between images), the decoder's RMSNorm then sees the
        # same direction for every image, and the vision tower's gradient vanishes.
        loss = loss + EMBED_PENALTY * image_embeds.pow(2).mean()
        if args.attention_weight > 0:
            loss = loss + args.attention_weight * attention_loss(probs, attn_mask)
        if aux is not None:
            loss = loss + args.aux_weight * aux.loss(image_embeds, cell_colour, cell_shape, cell_box, gh, gw)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        # How much the image embeddings differ between images, next to their size: a
        # collapse to one constant vector shows as a falling ratio.
        with torch.no_grad():
            spread = float((image_embeds - image_embeds.mean(0, keepdim=True)).std() / image_embeds.pow(2).mean().sqrt())
        avg = float(loss) if avg is None else 0.98 * avg + 0.02 * float(loss)
        avg_hard = float(hard) if avg_hard is None else 0.98 * avg_hard + 0.02 * float(hard)
        if block_hard is not None:
            avg_block = float(block_hard) if avg_block is None else 0.98 * avg_block + 0.02 * float(block_hard)
        if margin is not None:
            avg_margin = float(margin) if avg_margin is None else 0.98 * avg_margin + 0.02 * float(margin)
            avg_open = still_open if avg_open is None else 0.98 * avg_open + 0.02 * still_open
        if kl is not None:
            avg_kl = float(kl) if avg_kl is None else 0.98 * avg_kl + 0.02 * float(kl)
        done = step + 1
        if done % 25 == 0:
            el = time.time() - t0
            blk = "" if avg_block is None else f" block ce {avg_block:.3f}"
            if avg_margin is not None:
                blk += f" margin {avg_margin:.3f} coord-in-top4 {avg_open:.3f}"
            if avg_kl is not None:
                blk += f" kl {avg_kl:.4f}"
            print(f"step {done} loss {avg:.3f} ce {avg_hard:.3f}{blk} lr {opt.param_groups[0]['lr']:.2e} image spread {spread:.3f} "
                  f"grid {gh}x{gw} {el / (done - start_step):.2f}s/step elapsed {el / 60:.1f}min", flush=True)
        if done % args.save_every == 0 or done == args.steps:
            save(done)
        if args.stop_after and done >= args.stop_after:
            save(done)
            print(f"stopped after step {done} as asked", flush=True)
            break
        if args.max_minutes and time.time() - t0 > args.max_minutes * 60:
            save(done)
            print(f"stopped at step {done} after {args.max_minutes} minutes", flush=True)
            break


if __name__ == "__main__":
    main()
