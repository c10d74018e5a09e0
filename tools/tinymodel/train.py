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
from tinyla import refmodel  # noqa: E402

IGNORE = -100
COORD_SIGMA = 6.0  # coordinate units (per mille) of the soft target around the true value
SOFT_WEIGHT = 0.5


def batch_rng(seed, step):
    """Each step's scenes come from their own generator, so a resumed run sees the same
    batches as an uninterrupted one."""
    return random.Random(seed * 1_000_003 + step)


def produce(tok_dir, seed, start, steps, batch_size, queue):
    """Runs in a child process: makes the batches of steps start..steps-1, in order."""
    torch.set_num_threads(1)
    tok = bpe.Tokenizer.load(tok_dir)
    for step in range(start, steps):
        # numpy arrays travel by value; torch tensors would be shared through file
        # descriptors that vanish when this process ends before the trainer reads them.
        queue.put(tuple(x.numpy() if torch.is_tensor(x) else x for x in make_batch(batch_rng(seed, step), tok, batch_size)))


def make_batch(rng, tok, batch_size):
    """One batch of scenes of one image size (so one vision grid): patches [B, L, 3, 14, 14],
    the grid, ids [B, S] right-padded, targets [B, S] (IGNORE outside the answers)."""
    size = scenes.random_size(rng)
    patches, rows = [], []
    for _ in range(batch_size):
        scene = scenes.make_scene(rng, size=size)
        task, query, answer = scenes.make_query(rng, scene)
        p, gh, gw = tinyla.prepare_image(scene.image)
        patches.append(p)
        n_img = gh * gw // 4
        prompt = tinyla.prompt_ids(tok, task, query, n_img)
        rows.append((prompt, tinyla.answer_ids(tok, answer)))
    S = max(len(p) + len(a) for p, a in rows)
    pad = tok.id("<|endoftext|>")
    ids = torch.full((batch_size, S), pad, dtype=torch.long)
    targets = torch.full((batch_size, S), IGNORE, dtype=torch.long)
    for i, (p, a) in enumerate(rows):
        seq = p + a
        ids[i, :len(seq)] = torch.tensor(seq)
        # Position t predicts token t+1: only the answer tokens are learned.
        targets[i, len(p) - 1:len(seq) - 1] = torch.tensor(a)
    return torch.stack(patches), gh, gw, ids, targets


def loss_fn(logits, targets, c0, c1):
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
    weights = torch.exp(-0.5 * ((values[None] - true[:, None]) / COORD_SIGMA) ** 2)
    weights = weights / weights.sum(-1, keepdim=True)
    soft = -(weights * logp).sum(-1).mean()
    return hard + SOFT_WEIGHT * soft, hard


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
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the trainer (a second process makes the scenes); on a "
                         "shared, loaded machine 1 is much faster than 2")
    ap.add_argument("--save-every", type=int, default=250, help="steps between checkpoint writes")
    ap.add_argument("--state", default="", help="file for the resumable training state (model + optimizer)")
    ap.add_argument("--resume", action="store_true", help="continue from --state")
    ap.add_argument("--max-minutes", type=float, default=0, help="stop (and save) after this much wall time")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tok = bpe.Tokenizer.load(args.tokenizer)
    cfg = tinyla.make_config(tok)
    model = refmodel.LocateAnything(cfg, lm_head=False)
    tinyla.init_weights(model, tok, args.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.endswith("embed_tokens.weight")]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and not n.endswith("embed_tokens.weight"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98))
    start_step = 0
    if args.resume:
        state = torch.load(args.state)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start_step = state["step"]
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params}; vocab {cfg.text.vocab}; steps {start_step}..{args.steps}", flush=True)

    def save(step):
        tinyla.save(model, tok, args.out)
        if args.state:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, args.state + ".tmp")
            os.replace(args.state + ".tmp", args.state)

    c0, c1 = cfg.coord_start_token_id, cfg.coord_end_token_id
    model.train()
    ctx = mp.get_context("fork")
    queue = ctx.Queue(maxsize=6)
    producer = ctx.Process(target=produce, args=(args.tokenizer, args.seed, start_step, args.steps, args.batch, queue),
                           daemon=True)
    producer.start()
    try:
        train_loop(args, model, opt, queue, start_step, save, c0, c1)
    finally:
        producer.terminate()
        producer.join()


def train_loop(args, model, opt, queue, start_step, save, c0, c1):
    t0, avg, avg_hard = time.time(), None, None
    for step in range(start_step, args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        patches, gh, gw, ids, targets = (torch.from_numpy(x) if hasattr(x, "dtype") else x for x in queue.get())
        where = targets != IGNORE
        logits = tinyla.forward_batch(model, patches, gh, gw, ids, where)
        loss, hard = loss_fn(logits, targets[where], c0, c1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        avg = float(loss) if avg is None else 0.98 * avg + 0.02 * float(loss)
        avg_hard = float(hard) if avg_hard is None else 0.98 * avg_hard + 0.02 * float(hard)
        done = step + 1
        if done % 25 == 0:
            el = time.time() - t0
            print(f"step {done} loss {avg:.3f} ce {avg_hard:.3f} lr {opt.param_groups[0]['lr']:.2e} "
                  f"grid {gh}x{gw} {el / (done - start_step):.2f}s/step elapsed {el / 60:.1f}min", flush=True)
        if done % args.save_every == 0 or done == args.steps:
            save(done)
        if args.max_minutes and time.time() - t0 > args.max_minutes * 60:
            save(done)
            print(f"stopped at step {done} after {args.max_minutes} minutes", flush=True)
            break


if __name__ == "__main__":
    main()
