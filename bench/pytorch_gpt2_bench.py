#!/usr/bin/env python3
"""PyTorch twin of `envgen run gpt2 --preset bench-cpu`, for tokens/s comparison.

Same model (GPT-2 style: pre-LN, causal attention, tanh-GELU MLP x4, learned
positions, tied embeddings, biases; n_layer 4, n_head 4, n_embd 256, block
128, vocab 256 = 3,257,856 parameters), same batch (16 x 128 tokens), same
optimizer (AdamW beta=(0.9, 0.95), eps 1e-8, wd 0.1 on >=2-D params, global
grad-norm clip 1.0). Random tokens (throughput does not depend on the data).

Usage: python3 bench/pytorch_gpt2_bench.py [--threads 2] [--steps 20] [--warmup 3]
Prints one JSON line: median tokens/s over the timed steps.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.c_attn = nn.Linear(d, 3 * d)
        self.attn_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        heads = lambda z: z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer=4, n_head=4, d=256, block=128, vocab=256):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.h = nn.ModuleList([Block(d, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias") and "ln" not in name:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1337)
    model = GPT()
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
    )
    batch, block = 16, 128
    times = []
    for step in range(args.warmup + args.steps):
        x = torch.randint(0, 256, (batch, block))
        y = torch.randint(0, 256, (batch, block))
        start = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            times.append(elapsed)
    med = statistics.median(times)
    print(json.dumps({"torch": torch.__version__, "threads": args.threads, "parameters": n_params,
                      "median_step_ms": med * 1e3, "tokens_per_s": batch * block / med}))


if __name__ == "__main__":
    main()
