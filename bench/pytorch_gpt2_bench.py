#!/usr/bin/env python3
"""PyTorch twin of `envgen run gpt2 --preset P`, for training-throughput comparison.

Same model as envgen's `experiments/src/gpt2/model.rs`: GPT-2 style, pre-LN,
causal attention (F.scaled_dot_product_attention, is_causal=True), tanh-GELU
MLP x4, learned positions, tied input/output embeddings, biases, LayerNorm eps
1e-5, N(0, 0.02) init with the residual projections at 0.02/sqrt(2 n_layer).
Same optimizer as envgen's engine: AdamW beta=(0.9, 0.95), eps 1e-8, weight
decay 0.1 on >=2-D params (0 on biases and LayerNorm), global grad-norm clip
1.0. The shape and batch come from experiments/presets/gpt2/<preset>.toml
([model] n_layer, n_head, n_embd, block_size, vocab_size; [train] batch_size;
[hardware] micro_batch), so `--preset gpt2-124m` is the 124,475,904-parameter
model with 512 x 1024 tokens per optimizer step. Random tokens: throughput does
not depend on the data. Gradient accumulation as in nanoGPT / build-nanogpt:
each micro-batch's loss is divided by the number of micro-batches.

Default (no flags) = `--preset bench-cpu` on the CPU in fp32, which is the
model the CPU benchmark in docs/benchmarks.md uses (4/4/256, block 128,
batch 16, vocab 256 = 3,257,856 parameters):

    python3 bench/pytorch_gpt2_bench.py --threads 2 --steps 20 --warmup 3

GPU (see bench/README.md):

    python3 bench/pytorch_gpt2_bench.py --preset gpt2-124m --device cuda \\
        --dtype bf16 --micro-batch 64 --fused-adamw [--compile]

Prints one JSON line. Step time = one optimizer step over the global batch
(all micro-batches, clip, AdamW), median over the timed steps; on CUDA the
device is synchronized before and after each timed step.
"""
import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESET_DIR = Path(__file__).resolve().parent.parent / "experiments" / "presets" / "gpt2"

# Dense peak throughput of one NVIDIA H100 SXM, in TFLOPS (source: NVIDIA H100
# Tensor Core GPU datasheet; the datasheet's larger numbers are "with sparsity",
# i.e. 2x these). An H200 has the same compute peaks. Other GPUs: pass
# --peak-tflops.
H100_SXM_PEAK_TFLOPS = {"bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0}


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
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def load_preset(name):
    with open(PRESET_DIR / f"{name}.toml", "rb") as f:
        preset = tomllib.load(f)
    m = preset["model"]
    if m.get("dropout", 0.0):
        sys.exit(f"preset {name} uses dropout; this twin has none")
    return {
        "n_layer": m["n_layer"],
        "n_head": m["n_head"],
        "n_embd": m["n_embd"],
        "block_size": m["block_size"],
        "vocab_size": m["vocab_size"],
        "batch_size": preset["train"]["batch_size"],
        "micro_batch": preset.get("hardware", {}).get("micro_batch"),
    }


def model_flops_per_token(model, cfg):
    """Training FLOPs per token, as nanoGPT model.py estimate_mfu (PaLM paper,
    arXiv 2204.02311, Appendix B): 6N + 12*L*H*Q*T, where N is nanoGPT's
    get_num_params() = all parameters minus the position embeddings (the tied
    token embedding stays: it is the output layer's weight), L layers, H heads,
    Q head dim, T the block size (attention counted over the full T x T)."""
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    L, H, T = cfg["n_layer"], cfg["n_head"], cfg["block_size"]
    Q = cfg["n_embd"] // H
    return 6 * n + 12 * L * H * Q * T


def set_precision(device, dtype):
    """fp32: no TF32 anywhere; tf32: TF32 matmuls/convolutions; bf16/fp16:
    autocast around forward + loss with fp32 master weights (TF32 left off
    for the few fp32 matmuls autocast keeps)."""
    tf32 = dtype == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if dtype in ("bf16", "fp16"):
        amp_dtype = torch.bfloat16 if dtype == "bf16" else torch.float16
        return lambda: torch.autocast(device_type=device, dtype=amp_dtype)
    return lambda: torch.autocast(device_type=device, enabled=False)


def default_peak_tflops(device, dtype):
    if device != "cuda":
        return None
    return H100_SXM_PEAK_TFLOPS[dtype]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=["bench-cpu", "tiny", "gpt2-124m"], default="bench-cpu")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed optimizer steps first")
    ap.add_argument("--micro-batch", type=int, default=None,
                    help="sequences per forward/backward (default: the preset's [hardware] micro_batch)")
    ap.add_argument("--global-batch", type=int, default=None,
                    help="override the preset's train.batch_size (smoke tests only)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "tf32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--compile-backend", default="inductor",
                    help="torch.compile backend (default inductor; 'eager' only checks tracing)")
    ap.add_argument("--fused-adamw", action="store_true", help="AdamW(fused=True) on cuda")
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="peak TFLOPS for MFU (default on cuda: H100 SXM dense for --dtype)")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--profile", metavar="FILE", default=None,
                    help="profile the last timed step with torch.profiler; its per-kernel table goes to FILE")
    args = ap.parse_args()

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch.cuda.is_available() is False")
    cfg = load_preset(args.preset)
    batch = args.global_batch or cfg["batch_size"]
    micro = min(args.micro_batch or cfg["micro_batch"] or batch, batch)
    if batch % micro:
        sys.exit(f"micro-batch {micro} does not divide the global batch {batch}")
    grad_accum = batch // micro
    block, vocab = cfg["block_size"], cfg["vocab_size"]

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    autocast = set_precision(args.device, args.dtype)

    model = GPT(cfg["n_layer"], cfg["n_head"], cfg["n_embd"], block, vocab).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    flops_per_token = model_flops_per_token(model, cfg)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    fused = args.fused_adamw and args.device == "cuda"
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if fused else {}),
    )
    scaler = torch.amp.GradScaler(args.device, enabled=args.dtype == "fp16")
    fwd = torch.compile(model, backend=args.compile_backend) if args.compile else model

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    times = []
    loss_value = None
    # With --profile, one more step after the timed ones runs under the profiler
    # (its overhead stays out of the median).
    total_steps = args.warmup + args.steps + (1 if args.profile else 0)
    for step in range(total_steps):
        # The global batch is drawn before the clock starts (as before: data
        # loading is not what is measured).
        x = torch.randint(0, vocab, (batch, block), device=device)
        y = torch.randint(0, vocab, (batch, block), device=device)
        profiling = args.profile and step == total_steps - 1
        if profiling:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]
                                          + ([torch.profiler.ProfilerActivity.CUDA] if args.device == "cuda" else []))
            prof.__enter__()
        sync()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=device)
        for m in range(grad_accum):
            rows = slice(m * micro, (m + 1) * micro)
            with autocast():
                loss = fwd(x[rows], y[rows]) / grad_accum
            total += loss.detach()
            scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        sync()
        elapsed = time.perf_counter() - start
        if profiling:
            prof.__exit__(None, None, None)
            key = "self_cuda_time_total" if args.device == "cuda" else "self_cpu_time_total"
            with open(args.profile, "w") as f:
                f.write(prof.key_averages().table(sort_by=key, row_limit=40))
        if args.warmup <= step < args.warmup + args.steps:
            times.append(elapsed)
        loss_value = total.item()

    med = statistics.median(times)
    tokens_per_step = batch * block
    peak = args.peak_tflops if args.peak_tflops is not None else default_peak_tflops(args.device, args.dtype)
    achieved_tflops = flops_per_token * tokens_per_step / med / 1e12
    name = torch.cuda.get_device_name(device) if args.device == "cuda" else "cpu"
    if args.device == "cuda" and args.peak_tflops is None and not any(s in name for s in ("H100", "H200")):
        print(f"warning: MFU uses H100 SXM peaks on {name}; pass --peak-tflops", file=sys.stderr)
    print(json.dumps({
        "torch": torch.__version__,
        "device": name,
        "threads": args.threads,
        "preset": args.preset,
        "dtype": args.dtype,
        "compile": args.compile,
        "fused_adamw": fused,
        "global_batch": batch,
        "micro_batch": micro,
        "grad_accum": grad_accum,
        "block_size": block,
        "parameters": n_params,
        "steps": args.steps,
        "median_step_ms": med * 1e3,
        "min_step_ms": min(times) * 1e3,
        "tokens_per_s": tokens_per_step / med,
        "model_flops_per_token": flops_per_token,
        "achieved_tflops": achieved_tflops,
        "peak_tflops": peak,
        "mfu": achieved_tflops / peak if peak else None,
        "final_loss": loss_value,
    }))


if __name__ == "__main__":
    main()
