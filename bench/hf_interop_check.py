#!/usr/bin/env python3
"""Check that an envgen GPT-2 run's `model.safetensors` loads in Hugging Face
`transformers` and computes the same thing as envgen.

Usage: python3 bench/hf_interop_check.py RUN_DIR [--prompt TEXT] [--tokens N]

Loads the weights into `GPT2LMHeadModel` with strict key checking (every
tensor name and shape must match), then greedy-decodes N byte tokens from the
prompt and compares them with `envgen sample RUN_DIR --temperature 0`.
Needs torch and transformers; byte-level runs only (vocab 256).
"""
import argparse
import json
import subprocess
import tomllib
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--prompt", default="the ")
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--envgen", default="target/debug/envgen")
    args = ap.parse_args()
    run = Path(args.run_dir)
    model_cfg = tomllib.loads((run / "config.toml").read_text())["model"]
    config = GPT2Config(
        vocab_size=model_cfg["vocab_size"],
        n_positions=model_cfg["block_size"],
        n_embd=model_cfg["n_embd"],
        n_layer=model_cfg["n_layer"],
        n_head=model_cfg["n_head"],
        activation_function="gelu_new",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        bos_token_id=None, eos_token_id=None,
    )
    model = GPT2LMHeadModel(config)
    state = load_file(str(run / "model.safetensors"))
    # HF keeps the tied lm_head and attention-mask buffers out of the file.
    missing, unexpected = model.transformer.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith((".attn.bias", ".attn.masked_bias"))]
    assert not missing and not unexpected, f"missing {missing}, unexpected {unexpected}"
    model.tie_weights()
    model.eval()

    ids = list(args.prompt.encode())
    with torch.no_grad():
        for _ in range(args.tokens):
            context = torch.tensor([ids[-config.n_positions:]])
            ids.append(int(model(context).logits[0, -1].argmax()))
    hf_text = bytes(ids).decode("utf-8", errors="replace")

    out = subprocess.run(
        [args.envgen, "sample", str(run), "--prompt", args.prompt,
         "--tokens", str(args.tokens), "--temperature", "0"],
        check=True, capture_output=True, text=True,
    ).stdout
    # `envgen sample` prints the prompt and its continuation, then a newline.
    envgen_text = out[:-1] if out.endswith("\n") else out
    print(json.dumps({"tensors": len(state), "hf": hf_text, "envgen": envgen_text,
                      "identical": hf_text == envgen_text}))


if __name__ == "__main__":
    main()
