#!/usr/bin/env python3
"""Generation speed: `envgen sample --model hf:DIR` against transformers'
`generate` on the CPU, same checkpoint, same prompt, same threads, greedy,
back to back (issue #23: RFT's sampling stage is generation).

  hf_generate_bench.py --envgen PATH [--shape smollm2-360m] [--dir DIR]
      [--batch 1,16] [--new-tokens 32] [--threads 2] [--repeats 3]

The checkpoint is made here, once per DIR, with random weights in the shape
of a real model (`--shape`: smollm2-360m, smollm2-135m or tiny; the sizes are
those of HuggingFaceTB/SmolLM2-*-Instruct's config.json) and a small
byte-level BPE tokenizer: the speed does not depend on the weights' values,
and nothing is downloaded. The config has no end-of-sequence id, so every
row of both sides generates exactly --new-tokens tokens.

Per batch size and repeat, one JSON line per side: tokens_per_s is the
batch's new tokens over the time of generation alone (envgen: `generate_s`
from `sample --json`; transformers: around `model.generate`, loading
excluded on both sides). The last line: the medians and envgen's ratio per
batch size, and how many of row 0's greedy tokens the two sides agree on
(a check that both did the same work).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# HuggingFaceTB/SmolLM2-{360M,135M}-Instruct config.json (hidden, layers,
# heads, kv heads, MLP width; vocab 49152, tied embeddings, rope_theta 1e5).
SHAPES = {
    "smollm2-360m": dict(hidden_size=960, num_hidden_layers=32, num_attention_heads=15,
                         num_key_value_heads=5, intermediate_size=2560, vocab_size=49152,
                         rope_theta=100000.0, max_position_embeddings=8192),
    "smollm2-135m": dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, intermediate_size=1536, vocab_size=49152,
                         rope_theta=100000.0, max_position_embeddings=8192),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=128, vocab_size=512,
                 rope_theta=10000.0, max_position_embeddings=256),
}
PROMPT = "Convert 3 kilometers to meters. Show your work, then give the answer."


def make_checkpoint(directory, shape):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(tie_word_embeddings=True, rms_norm_eps=1e-5, bos_token_id=None,
                         eos_token_id=None, pad_token_id=None, **SHAPES[shape])
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = None
    model.save_pretrained(directory)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = (PROMPT + " One kilometer is 1000 meters, so 3 km is 3000 m. ") * 8
    tok.train_from_iterator([text], trainers.BpeTrainer(
        vocab_size=300, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(os.path.join(directory, "tokenizer.json"))


def run_envgen(args, batch):
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    cmd = [args.envgen, "sample", "--model", "hf:" + args.dir, "--prompt", PROMPT,
           "--tokens", str(args.new_tokens), "--temperature", "0", "--batch", str(batch), "--json"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout)


def run_transformers(model, prompt_ids, args, batch):
    import torch

    ids = torch.tensor([prompt_ids] * batch)
    with torch.no_grad():
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                             pad_token_id=0, use_cache=True)
        seconds = time.perf_counter() - start
    new = out[:, len(prompt_ids):]
    return {"generated_tokens": new.numel(), "generate_s": seconds,
            "tokens_per_s": new.numel() / seconds, "tokens": new[0].tolist()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--envgen", required=True, help="the envgen binary")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-360m")
    ap.add_argument("--dir", default=None, help="checkpoint folder (made if missing)")
    ap.add_argument("--batch", default="1,16", help="comma-separated batch sizes")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    args.dir = os.path.abspath(args.dir or f"hf-bench-{args.shape}")
    batches = [int(b) for b in args.batch.split(",")]

    import torch
    import transformers
    from transformers import LlamaForCausalLM

    torch.set_num_threads(args.threads)
    if not os.path.exists(os.path.join(args.dir, "config.json")):
        make_checkpoint(args.dir, args.shape)
    model = LlamaForCausalLM.from_pretrained(args.dir, dtype=torch.float32).eval()

    rows = {}
    for repeat in range(args.repeats):
        for batch in batches:
            # envgen first, then transformers, alternating per batch size:
            # both see the same machine state, back to back.
            e = run_envgen(args, batch)
            t = run_transformers(model, e["prompt_tokens"], args, batch)
            agree = 0
            for a, b in zip(e["tokens"], t["tokens"]):
                if a != b:
                    break
                agree += 1
            for side, r in (("envgen", e), ("transformers", t)):
                line = {"side": side, "batch": batch, "repeat": repeat, "threads": args.threads,
                        "shape": args.shape, "new_tokens": args.new_tokens,
                        "generated_tokens": r["generated_tokens"],
                        "generate_s": round(r["generate_s"], 4),
                        "tokens_per_s": round(r["tokens_per_s"], 2)}
                print(json.dumps(line), flush=True)
                rows.setdefault((side, batch), []).append(r["tokens_per_s"])
            rows.setdefault(("agree", batch), []).append(agree)
    summary = {"side": "summary", "shape": args.shape, "threads": args.threads,
               "new_tokens": args.new_tokens, "repeats": args.repeats,
               "torch": torch.__version__, "transformers": transformers.__version__,
               "batches": {}}
    for batch in batches:
        e = statistics.median(rows[("envgen", batch)])
        t = statistics.median(rows[("transformers", batch)])
        summary["batches"][str(batch)] = {
            "envgen_tokens_per_s": round(e, 2), "transformers_tokens_per_s": round(t, 2),
            "envgen_over_transformers": round(e / t, 3),
            "greedy_tokens_agreeing": min(rows[("agree", batch)])}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
