#!/usr/bin/env python3
"""PyTorch twin of `envgen run hrm-sudoku --preset P`, for training-throughput comparison.

Written from envgen's Burn implementation (experiments/src/hrm/{model,act,loss,
optim,train,config}.rs; docs/experiments/hrm.md), which follows the reference
sapientinc/HRM `hrm_act_v1`. The shape and batch come from
experiments/presets/hrm-sudoku/<preset>.toml.

What one optimizer step does (as envgen's `HrmTrainer::train_step`):
  * The global batch (train.global_batch_size rows) is split into fixed
    chunks of --micro-batch rows; each chunk keeps its own ACT state (carry
    z_H/z_L, current puzzle, segment count, halted flag) across steps.
  * Per chunk: halted rows take the same row of a fresh batch and a reset
    carry (H_init/L_init); one segment runs with the 1-step gradient
    (h_cycles x l_cycles L-updates and h_cycles H-updates, all but the last
    L- and H-update under torch.no_grad()); halting = (segments >= halt_max_steps
    or q_halt > q_continue) and segments >= an exploration floor (with
    probability halt_exploration_prob a row must run U{2..halt_max_steps}
    segments); the q_continue target comes from one more whole segment under
    no_grad on the new carry: sigmoid(next q_halt if this was the last allowed
    segment else max(next q_halt, next q_continue)).
  * Loss per chunk: stablemax cross-entropy (mean over a puzzle's non-PAD
    cells, summed over rows, computed in fp32) + 0.5 * (BCE(q_halt, puzzle
    exactly right) + BCE(q_continue, target)), both summed over rows; divided
    by the *global* batch size and back-propagated; gradients accumulate over
    the chunks.
  * One update: Adam-atan2 (beta 0.9/0.95, decoupled weight decay, no eps; the
    update is atan2(m, sqrt(v)/sqrt(1-beta2^t)) scaled by lr/(1-beta1^t)) on
    every trainable tensor but the puzzle embedding, SignSGD with decoupled
    weight decay on the puzzle embedding; lr warmup then cosine to
    lr_min_ratio (constant for both presets after warmup). No gradient clipping.

Model (as envgen's `HrmModel`): token embedding [vocab, D] (trunc-normal std
1/sqrt(D)) and a zero-initialized puzzle embedding [num_puzzle_ids,
puzzle_emb_len*D] in front of the 81 cells (82 positions), scaled by sqrt(D);
H and L modules of post-norm blocks x = rms(x + attn(x)); x = rms(x + mlp(x))
(RMSNorm without weight), non-causal multi-head attention with RoPE ("rotate
half", theta from the preset) via F.scaled_dot_product_attention, SwiGLU of
width roundup(expansion*D*2/3, 256), no biases, truncated LeCun-normal init;
lm_head on z_H's cell positions, Q-head (halt, continue; weight 0, bias -5) on
position 0; H_init/L_init are trunc-normal std-1 buffers (not trainable).
Trainable parameters equal envgen's `parameter_count`: 27,275,778 for
sudoku-extreme-1k, 132,674 for tiny (checked at start-up).

Known differences from envgen (none changes the work per step):
  * Halting is decided on the device (torch ops on q_halt/q_continue, no host
    round trip), as the PyTorch reference does; envgen copies q_halt/q_continue
    to the host for it. The exploration draws use torch's RNG, not envgen's.
  * envgen also computes training metrics every step (exact and blank-cell
    accuracy, loss parts read back to the host); this twin computes only what
    the loss needs.
  * Random Sudoku-shaped data (inputs in 1..10, labels in 2..10, puzzle id 0),
    drawn on the device before each timed step; envgen samples real augmented
    puzzles on the host inside its step. With random labels no puzzle is ever
    solved, so rows run halt_max_steps segments and then restart - the same
    per-step work as real data (every row runs exactly one segment per step).
  * Precision: --dtype bf16/fp16 is torch.autocast around the segments with fp32
    weights and an fp32 carry (matmuls and attention in bf16/fp16, RMSNorm, the
    residual stream and the loss in fp32; fp16 adds a GradScaler). That is the
    split envgen's autocast scope (kernels/src/autocast.rs) makes; the
    reference HRM instead casts the whole forward to bf16.

Usage:
    python3 bench/pytorch_hrm_bench.py --preset tiny --steps 20 --warmup 3
    python3 bench/pytorch_hrm_bench.py --preset sudoku-extreme-1k --device cuda --dtype bf16 [--compile]

Prints one JSON line: median optimizer-step time over the timed steps (CUDA
synchronized around each), steps/s, puzzles/s (= rows of the global batch per
second; each row advances one ACT segment per step), and an MFU estimate from
the FLOPs the step executes (see `executed_flops_per_step`).
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

PRESET_DIR = Path(__file__).resolve().parent.parent / "experiments" / "presets" / "hrm-sudoku"

# Dense peak throughput of one NVIDIA H100 SXM, in TFLOPS (source: NVIDIA H100
# Tensor Core GPU datasheet; its larger numbers are "with sparsity", 2x these).
# An H200 has the same compute peaks. Other GPUs: pass --peak-tflops.
H100_SXM_PEAK_TFLOPS = {"bf16": 989.0, "fp16": 989.0, "tf32": 494.0, "fp32": 67.0}

# Standard deviation of a standard normal truncated to [-2, 2]; dividing by it
# makes a truncated draw have the requested std (envgen's `trunc_normal`).
TRUNC2_STD = 0.8796267


def load_preset(name):
    with open(PRESET_DIR / f"{name}.toml", "rb") as f:
        return tomllib.load(f)


def intermediate(m):
    """SwiGLU width: round(expansion*D*2/3) rounded up to a multiple of 256."""
    raw = math.floor(m["expansion"] * m["hidden"] * 2 / 3 + 0.5)
    return -(-raw // 256) * 256


def envgen_parameter_count(m):
    """envgen's `hrm::model::parameter_count` (trainable; H_init/L_init excluded)."""
    d, inter = m["hidden"], intermediate(m)
    block = d * 3 * d + d * d + d * 2 * inter + inter * d
    return ((m["h_layers"] + m["l_layers"]) * block + m["vocab"] * d
            + m["num_puzzle_ids"] * m["puzzle_emb_len"] * d + d * m["vocab"] + d * 2 + 2)


def trunc_normal(shape, std):
    t = torch.empty(shape)
    nn.init.trunc_normal_(t, 0.0, 1.0, -2.0, 2.0)
    return t * (std / TRUNC2_STD)


def lecun_linear(d_in, d_out):
    layer = nn.Linear(d_in, d_out, bias=False)
    with torch.no_grad():
        layer.weight.copy_(trunc_normal((d_out, d_in), 1.0 / math.sqrt(d_in)))
    return layer


def rms_norm(x, eps):
    x = x.float()
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


def rope(x, cos, sin):
    """Rotate x [B, heads, T, hd]: dimension i pairs with i + hd/2."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = lecun_linear(d, 3 * d)
        self.out = lecun_linear(d, d)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3 * self.heads, d // self.heads).transpose(1, 2)
        q, k, v = qkv.split(self.heads, dim=1)
        y = F.scaled_dot_product_attention(rope(q, cos, sin), rope(k, cos, sin), v)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class SwiGlu(nn.Module):
    def __init__(self, d, inter):
        super().__init__()
        self.gate_up = lecun_linear(d, 2 * inter)
        self.down = lecun_linear(inter, d)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    """Post-norm: x = rms(x + attn(x)); x = rms(x + mlp(x))."""

    def __init__(self, m):
        super().__init__()
        self.eps = m["rms_norm_eps"]
        self.attn = Attention(m["hidden"], m["heads"])
        self.mlp = SwiGlu(m["hidden"], intermediate(m))

    def forward(self, x, cos, sin):
        x = rms_norm(x + self.attn(x, cos, sin), self.eps)
        return rms_norm(x + self.mlp(x), self.eps)


class ReasoningModule(nn.Module):
    def __init__(self, m, layers):
        super().__init__()
        self.blocks = nn.ModuleList([Block(m) for _ in range(layers)])

    def forward(self, state, injection, cos, sin):
        x = state + injection
        for block in self.blocks:
            x = block(x, cos, sin)
        return x


class Hrm(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
        d = m["hidden"]
        self.token_embedding = nn.Parameter(trunc_normal((m["vocab"], d), 1.0 / math.sqrt(d)))
        self.puzzle_embedding = nn.Parameter(torch.zeros(m["num_puzzle_ids"], m["puzzle_emb_len"] * d))
        self.h_level = ReasoningModule(m, m["h_layers"])
        self.l_level = ReasoningModule(m, m["l_layers"])
        self.lm_head = lecun_linear(d, m["vocab"])
        self.q_head = nn.Linear(d, 2)
        with torch.no_grad():
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(-5.0)
        self.register_buffer("h_init", trunc_normal((d,), 1.0))
        self.register_buffer("l_init", trunc_normal((d,), 1.0))
        total = m["seq_len"] + m["puzzle_emb_len"]
        hd = d // m["heads"]
        dims = torch.arange(hd, dtype=torch.float64) % (hd // 2)
        inv_freq = m["rope_theta"] ** (-2.0 * dims / hd)
        angle = torch.arange(total, dtype=torch.float64)[:, None] * inv_freq[None, :]
        self.register_buffer("cos", angle.cos().float())
        self.register_buffer("sin", angle.sin().float())

    def embed(self, inputs, puzzle_ids):
        b = inputs.shape[0]
        m = self.m
        puzzle = self.puzzle_embedding[puzzle_ids].view(b, m["puzzle_emb_len"], m["hidden"])
        tokens = F.embedding(inputs, self.token_embedding)
        return torch.cat((puzzle, tokens), dim=1) * math.sqrt(m["hidden"])

    def forward(self, z_h, z_l, inputs, puzzle_ids):
        """One segment; returns the detached new carry, cell logits, q_halt, q_continue."""
        m = self.m
        cos, sin = self.cos, self.sin
        x = self.embed(inputs, puzzle_ids)
        with torch.no_grad():
            for h in range(m["h_cycles"]):
                for l in range(m["l_cycles"]):
                    if not (h == m["h_cycles"] - 1 and l == m["l_cycles"] - 1):
                        z_l = self.l_level(z_l, z_h + x, cos, sin)
                if h < m["h_cycles"] - 1:
                    z_h = self.h_level(z_h, z_l, cos, sin)
        # The 1-step gradient: only the last L- and H-update carry a graph.
        z_l = self.l_level(z_l, z_h + x, cos, sin)
        z_h = self.h_level(z_h, z_l, cos, sin)
        logits = self.lm_head(z_h[:, m["puzzle_emb_len"]:])
        q = self.q_head(z_h[:, 0]).float()
        return z_h.detach(), z_l.detach(), logits, q[:, 0], q[:, 1]


def log_stablemax(x):
    """log s(x_i) - log sum_j s(x_j), s(x) = 1/(1-x) for x<0 else x+1 (clamped
    branches as envgen, so neither side makes an inf)."""
    s = 1.0 / (1.0 - x.clamp(max=0.0)) + x.clamp(min=0.0)
    return s.log() - s.sum(dim=-1, keepdim=True).log()


def hrm_loss(logits, labels, q_halt, q_continue, target_q_continue):
    """lm + 0.5*(BCE(q_halt, solved) + BCE(q_continue, target)), summed over rows, fp32."""
    logits = logits.float()
    valid = labels != 0  # PAD = 0 carries no loss
    with torch.no_grad():
        solved = ((logits.argmax(dim=-1) == labels) | ~valid).all(dim=-1).float()
    picked = log_stablemax(logits).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    per_row = -(picked * valid).sum(dim=-1) / valid.sum(dim=-1).clamp(min=1)
    lm = per_row.sum()
    halt = F.binary_cross_entropy_with_logits(q_halt, solved, reduction="sum")
    if target_q_continue is None:
        cont = q_continue.sum() * 0.0
    else:
        cont = F.binary_cross_entropy_with_logits(q_continue, target_q_continue, reduction="sum")
    return lm + 0.5 * (halt + cont)


class HrmOptimizer(torch.optim.Optimizer):
    """Group kind "adam_atan2": decoupled decay, then
    theta -= lr/(1-b1^t) * atan2(m, sqrt(v)/sqrt(1-b2^t)) (envgen's AdamAtan2);
    group kind "signsgd": theta = theta*(1-lr*wd) - lr*sign(g) (envgen's SignSgd)."""

    def __init__(self, groups, betas):
        super().__init__(groups, {"lr": 0.0, "weight_decay": 0.0, "betas": betas, "kind": "adam_atan2"})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            lr, wd = group["lr"], group["weight_decay"]
            torch._foreach_mul_(params, 1.0 - lr * wd)
            if group["kind"] == "signsgd":
                torch._foreach_add_(params, torch._foreach_sign(grads), alpha=-lr)
                continue
            b1, b2 = group["betas"]
            group["t"] = t = group.get("t", 0) + 1
            ms, vs = [], []
            for p in params:
                state = self.state[p]
                if not state:
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                ms.append(state["m"])
                vs.append(state["v"])
            torch._foreach_lerp_(ms, grads, 1.0 - b1)
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, grads, grads, value=1.0 - b2)
            denom = torch._foreach_sqrt(vs)
            torch._foreach_div_(denom, math.sqrt(1.0 - b2 ** t))
            step_size = lr / (1.0 - b1 ** t)
            for p, m, dn in zip(params, ms, denom):
                p.add_(torch.atan2(m, dn), alpha=-step_size)


def learning_rate(base, step, total_steps, train):
    """envgen's hrm::train::learning_rate (step is 1-based)."""
    warmup = train["lr_warmup_steps"]
    if step < warmup:
        return base * step / warmup
    span = max(total_steps - warmup, 1)
    progress = min((step - warmup) / span, 1.0)
    ratio = train["lr_min_ratio"]
    return base * (ratio + (1.0 - ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def executed_flops_per_step(m, rows):
    """Matmul FLOPs one training step executes (not a 6N-style estimate: HRM
    runs its blocks many times per step). Per token, one block forward is
    2*(block parameters) + 4*T*D (QK^T and AV over T = 82 positions, non-causal);
    backward = 2x forward. Per row and step: the no-grad warm-up
    (h*l - 1 L-calls, h - 1 H-calls), the last L- and H-call forward+backward,
    and the Q-target segment (h*l L-calls + h H-calls, forward only) when
    halt_max_steps > 1; plus lm_head (3x on the trained segment, 1x on the
    target segment) and the negligible Q-head."""
    d, inter = m["hidden"], intermediate(m)
    t = m["seq_len"] + m["puzzle_emb_len"]
    block_fwd = 2 * (4 * d * d + 3 * d * inter) + 4 * t * d
    hc, lc, hl, ll = m["h_cycles"], m["l_cycles"], m["h_layers"], m["l_layers"]
    block_calls = (hc * lc - 1) * ll + (hc - 1) * hl + 3 * (ll + hl)
    head_calls = 3
    if m["halt_max_steps"] > 1:
        block_calls += hc * lc * ll + hc * hl
        head_calls += 1
    per_row = t * block_calls * block_fwd + head_calls * m["seq_len"] * 2 * d * m["vocab"]
    return rows * per_row


class Chunk:
    """The ACT state of one micro-batch chunk of rows (envgen's ActState)."""

    def __init__(self, model, rows, seq_len, device):
        t = seq_len + model.m["puzzle_emb_len"]
        d = model.m["hidden"]
        self.z_h = model.h_init.expand(rows, t, d).clone()
        self.z_l = model.l_init.expand(rows, t, d).clone()
        self.steps = torch.zeros(rows, dtype=torch.int32, device=device)
        self.halted = torch.ones(rows, dtype=torch.bool, device=device)
        self.inputs = torch.zeros(rows, seq_len, dtype=torch.long, device=device)
        self.labels = torch.zeros(rows, seq_len, dtype=torch.long, device=device)
        self.puzzle_ids = torch.zeros(rows, dtype=torch.long, device=device)

    def replace_halted(self, model, inputs, labels, puzzle_ids):
        h = self.halted
        self.z_h = torch.where(h[:, None, None], model.h_init, self.z_h)
        self.z_l = torch.where(h[:, None, None], model.l_init, self.z_l)
        self.inputs = torch.where(h[:, None], inputs, self.inputs)
        self.labels = torch.where(h[:, None], labels, self.labels)
        self.puzzle_ids = torch.where(h, puzzle_ids, self.puzzle_ids)
        self.steps = torch.where(h, 0, self.steps)
        self.halted = torch.zeros_like(h)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=["tiny", "sudoku-extreme-1k"], default="tiny")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed optimizer steps first")
    ap.add_argument("--micro-batch", type=int, default=None,
                    help="rows per forward/backward (default: the whole global batch)")
    ap.add_argument("--global-batch", type=int, default=None,
                    help="override train.global_batch_size (smoke tests only)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "tf32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the segment and the loss")
    ap.add_argument("--compile-backend", default="inductor",
                    help="torch.compile backend (default inductor; 'eager' only checks tracing)")
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="peak TFLOPS for MFU (default on cuda: H100 SXM dense for --dtype)")
    args = ap.parse_args()

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch.cuda.is_available() is False")
    preset = load_preset(args.preset)
    m, train = preset["model"], preset["train"]
    batch = args.global_batch or train["global_batch_size"]
    micro = min(args.micro_batch or batch, batch)
    if batch % micro:
        sys.exit(f"micro-batch {micro} does not divide the global batch {batch}")
    grad_accum = batch // micro
    groups = preset["data"]["train_puzzles"]
    total_steps = math.ceil(train["epochs"] * groups / train["global_batch_size"])

    torch.set_num_threads(args.threads)
    torch.manual_seed(train["seed"])
    device = torch.device(args.device)
    tf32 = args.dtype == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.dtype)

    def autocast():
        return torch.autocast(device_type=args.device, dtype=amp_dtype, enabled=amp_dtype is not None)

    model = Hrm(m).to(device)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    expected = envgen_parameter_count(m)
    if n_params != expected:
        sys.exit(f"parameter count {n_params} != envgen's {expected}")
    network = [p for n, p in model.named_parameters() if n != "puzzle_embedding"]
    opt = HrmOptimizer(
        [{"params": network, "weight_decay": train["weight_decay"], "kind": "adam_atan2"},
         {"params": [model.puzzle_embedding], "weight_decay": train["puzzle_emb_weight_decay"],
          "kind": "signsgd"}],
        betas=(train["beta1"], train["beta2"]),
    )
    scaler = torch.amp.GradScaler(args.device, enabled=args.dtype == "fp16")
    segment = torch.compile(model, backend=args.compile_backend) if args.compile else model
    loss_fn = torch.compile(hrm_loss, backend=args.compile_backend) if args.compile else hrm_loss

    seq_len = m["seq_len"]
    max_steps = m["halt_max_steps"]
    chunks = [Chunk(model, micro, seq_len, device) for _ in range(grad_accum)]

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    times = []
    loss_value = None
    for step in range(1, args.warmup + args.steps + 1):
        # A fresh global batch of random Sudoku-shaped puzzles, drawn before
        # the clock starts: inputs blank (1) or digit (2..10), labels digits.
        fresh_inputs = torch.randint(1, 11, (batch, seq_len), device=device)
        fresh_labels = torch.randint(2, 11, (batch, seq_len), device=device)
        fresh_ids = torch.zeros(batch, dtype=torch.long, device=device)
        sync()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=device)
        for i, c in enumerate(chunks):
            rows = slice(i * micro, (i + 1) * micro)
            c.replace_halted(model, fresh_inputs[rows], fresh_labels[rows], fresh_ids[rows])
            with autocast():
                z_h, z_l, logits, q_halt, q_cont = segment(c.z_h, c.z_l, c.inputs, c.puzzle_ids)
            c.steps = c.steps + 1
            is_last = c.steps >= max_steps
            halted = is_last
            target = None
            if max_steps > 1:
                halted = halted | (q_halt.detach() > q_cont.detach())
                explore = torch.rand(micro, device=device) < m["halt_exploration_prob"]
                floor = explore * torch.randint(2, max_steps + 1, (micro,), device=device)
                halted = halted & (c.steps >= floor)
                with torch.no_grad(), autocast():
                    _, _, _, next_halt, next_cont = segment(z_h, z_l, c.inputs, c.puzzle_ids)
                target = torch.sigmoid(torch.where(is_last, next_halt, torch.maximum(next_halt, next_cont)))
            c.halted = halted
            c.z_h, c.z_l = z_h, z_l
            loss = loss_fn(logits, c.labels, q_halt, q_cont, target) / batch
            total += loss.detach()
            scaler.scale(loss).backward()
        for group in opt.param_groups:
            base = train["puzzle_emb_lr"] if group["kind"] == "signsgd" else train["lr"]
            group["lr"] = learning_rate(base, step, total_steps, train)
        scaler.step(opt)
        scaler.update()
        sync()
        elapsed = time.perf_counter() - start
        if step > args.warmup:
            times.append(elapsed)
        loss_value = total.item()

    med = statistics.median(times)
    flops = executed_flops_per_step(m, batch)
    achieved_tflops = flops / med / 1e12
    peak = args.peak_tflops
    if peak is None and args.device == "cuda":
        peak = H100_SXM_PEAK_TFLOPS[args.dtype]
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
        "global_batch": batch,
        "micro_batch": micro,
        "grad_accum": grad_accum,
        "parameters": n_params,
        "steps": args.steps,
        "median_step_ms": med * 1e3,
        "min_step_ms": min(times) * 1e3,
        "steps_per_s": 1.0 / med,
        "puzzles_per_s": batch / med,
        "executed_tflop_per_step": flops / 1e12,
        "achieved_tflops": achieved_tflops,
        "peak_tflops": peak,
        "mfu": achieved_tflops / peak if peak else None,
        "final_loss": loss_value,
    }))


if __name__ == "__main__":
    main()
