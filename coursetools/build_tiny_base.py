#!/usr/bin/env python
"""Build the small pretrained base model that lesson 08's CPU path fine-tunes with LoRA: memlab/assets/tiny-llama-reviews/.

    python scripts/build_tiny_base.py            train it (about a minute on 2 CPU cores) and write the folder
    python scripts/build_tiny_base.py --check    rebuild in memory; exit 1 if the shipped weights differ

LoRA adapts a *pretrained* model: on a randomly initialised base it has nothing to adapt (a rank-16 LoRA on a random
tiny Llama stays at chance on the offline IMDB set). No real checkpoint can be downloaded here, so the course ships
one it builds itself, deterministically: the byte-level BPE tokenizer of `memlab.data` (trained on the synthetic
IMDB and LM texts) and a 4-layer Llama (hidden 128, `memlab.models.tiny_llama_config`) trained as a causal LM on
4,000 synthetic IMDB reviews (`memlab.data.synthetic_imdb`, seed 1) for 300 steps of AdamW, batch 32 x 128 tokens,
fp32 on the CPU, torch.manual_seed(0). It is saved with `save_pretrained` (bf16 safetensors, ~2.5 MB) next to its
tokenizer, so lesson 08 loads it with the same `from_pretrained` calls as a Hub checkpoint.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSET = ROOT / "memlab" / "assets" / "tiny-llama-reviews"
STEPS, BATCH, SEQ, LR = 300, 32, 128, 3e-3


def build(folder: Path) -> list[float]:
    """Train the base and save it with its tokenizer to `folder`; return the loss every 50 steps."""
    import torch

    from memlab import data, models

    torch.manual_seed(0)
    tokenizer = data.train_bpe_tokenizer(
        list(data.synthetic_imdb("train", n=2_000)["text"])
        + list(data.synthetic_lm_text("train", n=1_000)["text"])
    )
    corpus = list(data.synthetic_imdb("train", n=4_000, seed=1)["text"])
    enc = tokenizer(corpus, max_length=SEQ, truncation=True, padding="max_length", return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    labels = ids.masked_fill(mask == 0, -100)
    config = models.tiny_llama_config(hidden_size=128, intermediate_size=344, num_hidden_layers=4)
    model = models.build_model(config, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / STEPS))
    )
    generator = torch.Generator().manual_seed(0)
    losses = []
    for step in range(STEPS):
        rows = torch.randint(0, len(ids), (BATCH,), generator=generator)
        loss = model(input_ids=ids[rows], attention_mask=mask[rows], labels=labels[rows]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 50 == 49:
            losses.append(round(loss.item(), 4))
            print(f"step {step + 1}: loss {loss.item():.4f}", flush=True)
    model.to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return losses


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="rebuild in a temporary folder and compare")
    args = parser.parse_args(argv)
    if not args.check:
        ASSET.mkdir(parents=True, exist_ok=True)
        build(ASSET)
        print(f"wrote {ASSET}")
        return 0
    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        fresh, shipped = load_file(Path(tmp) / "model.safetensors"), load_file(ASSET / "model.safetensors")
    differ = [k for k in shipped if k not in fresh or not (fresh[k] == shipped[k]).all()]
    for key in differ:
        print(f"differs: {key}")
    return 1 if differ or set(fresh) != set(shipped) else 0


if __name__ == "__main__":
    sys.exit(main())
