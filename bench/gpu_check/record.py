#!/usr/bin/env python3
"""One JSON line for one step of bench/gpu-check.sh, from its exit status,
wall time and logs (and, for envgen runs, the run directory's metrics.jsonl).

  record.py KIND NAME RC WALL_MS STDOUT STDERR [EXTRA_JSON]
  record.py compare RESULTS.jsonl      # the envgen / PyTorch ratios

KIND: check (a JSON line on stdout), smi, doctor, torch (the twins' JSON
line), envgen (a run: medians of its metrics.jsonl after `skip_first`
steps), probe, skip.
"""
import json
import os
import statistics
import sys

# gpt2-124m FLOPs per token (bench/README.md "MFU") and the H100 SXM dense
# bf16 peak (NVIDIA H100 datasheet, 989 TFLOPS).
GPT2_124M_FLOPS_PER_TOKEN = 855_383_040
H100_BF16_PEAK = 989e12


def text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def last_json(s):
    """The last line that is a JSON object, else the whole text as JSON."""
    for line in reversed(s.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    try:
        return json.loads(s)
    except ValueError:
        return None


def envgen_run(rec, out, err, extra):
    doc = last_json(out)
    run_dir = doc.get("run_dir") if isinstance(doc, dict) else None
    for line in err.splitlines():
        if not run_dir and line.startswith("envgen: run directory "):
            run_dir = line.split("envgen: run directory ", 1)[1].strip()
    rec["run_dir"] = run_dir
    if isinstance(doc, dict):
        rec["summary"] = doc.get("summary")
    steps, util, mem = [], [], []
    for line in text(os.path.join(run_dir or "/nonexistent", "metrics.jsonl")).splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if "gpu" in row:
            for g in row["gpu"]:
                util.append(g.get("util_percent", 0))
                mem.append(g.get("memory_used_gb", 0))
        elif row.get("step", 0) >= 1:
            steps.append(row)
    try:
        with open(os.path.join(run_dir or "/nonexistent", "manifest.json")) as f:
            rec["profile"] = json.load(f).get("profile")
    except (OSError, ValueError):
        pass
    unit = "tokens_per_s" if any("tokens_per_s" in s for s in steps) else "steps_per_s"
    skip = int(extra.get("skip_first", 2))
    rec["steps_done"] = len(steps)
    rec["step_ms"] = [round(s.get("step_ms", 0), 1) for s in steps]
    timed = [s[unit] for s in steps[skip:] if unit in s] or [s[unit] for s in steps[1:] if unit in s]
    if timed:
        rec["unit"] = unit
        rec["median_" + unit] = statistics.median(timed)
        rec["timed_steps"] = len(timed)
    if util:
        rec["gpu_util_mean_percent"] = round(sum(util) / len(util), 1)
        rec["gpu_mem_used_max_gb"] = round(max(mem), 2)


def record(kind, name, rc, wall_ms, out_path, err_path, extra):
    rc = int(rc)
    rec = {"name": name, "kind": kind, "rc": rc, "wall_s": round(float(wall_ms) / 1000, 2),
           "timed_out": rc in (124, 137)}
    rec.update(extra)
    out, err = text(out_path), text(err_path)
    if kind == "skip":
        rec["skipped"] = True
    elif kind in ("check", "torch", "probe"):
        rec["result"] = last_json(out)
    elif kind == "doctor":
        rec["doctor"] = last_json(out)
    elif kind == "smi":
        keys = ["index", "name", "compute_cap", "memory_total_mib", "driver_version", "pstate", "power_limit_w"]
        rec["gpus"] = [dict(zip(keys, l.split(", "))) for l in out.splitlines() if l.strip()]
    elif kind == "envgen":
        envgen_run(rec, out, err, extra)
    # 130: a run stopped by --stop-after (checkpointed), as asked.
    if rc not in (0, 130) and kind != "skip":
        rec["stderr_tail"] = err.splitlines()[-25:]
        rec["stdout_tail"] = out.splitlines()[-8:]
    return rec


def compare(results):
    by = {}
    for line in text(results).splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        by[row.get("name")] = row

    def get(name, key):
        row = by.get(name) or {}
        if row.get("kind") == "torch":
            return (row.get("result") or {}).get(key)
        return row.get("median_" + key)

    eg = get("envgen_gpt2_124m", "tokens_per_s")
    pe = get("torch_gpt2_124m_eager", "tokens_per_s")
    pc = get("torch_gpt2_124m_compile", "tokens_per_s")
    eh = get("envgen_hrm_sudoku_extreme_1k", "steps_per_s")
    ph = get("torch_hrm_sudoku_extreme_1k_eager", "steps_per_s")
    ratio = lambda a, b: a / b if a and b else None
    return {"name": "comparison", "kind": "summary",
            "gpt2_tokens_per_s": {"envgen": eg, "torch_eager": pe, "torch_compile": pc},
            "gpt2_envgen_over_eager": ratio(eg, pe), "gpt2_envgen_over_compile": ratio(eg, pc),
            "gpt2_envgen_mfu_h100_bf16": eg * GPT2_124M_FLOPS_PER_TOKEN / H100_BF16_PEAK if eg else None,
            "hrm_steps_per_s": {"envgen": eh, "torch_eager": ph},
            "hrm_envgen_over_eager": ratio(eh, ph)}


if __name__ == "__main__":
    if sys.argv[1] == "compare":
        print(json.dumps(compare(sys.argv[2])))
    else:
        extra = json.loads(sys.argv[7]) if len(sys.argv) > 7 else {}
        print(json.dumps(record(*sys.argv[1:7], extra)))
