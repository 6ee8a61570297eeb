//! `envgen sample RUN_DIR --prompt …`: generate text from a trained GPT-2
//! run; `envgen sample --model hf:DIR --prompt …`: from a Hugging Face
//! checkpoint (GPT-2 or Llama-family, by its config.json).

use std::path::{Path, PathBuf};
use std::time::Instant;

use envgen_experiments::backend::Cpu;
use envgen_experiments::data;
use envgen_experiments::gpt2::{self, eval, hf, Gpt2Config};
use envgen_experiments::llama::{self, GenerateOptions};
use envgen_experiments::pretrained::chat::TurnEnd;
use envgen_experiments::pretrained::generation::{Asked, CheckpointGeneration, Decoding};
use envgen_experiments::pretrained::{self, Pretrained};
use envgen_experiments::sampling::Sampling;
use serde_json::json;

use crate::error::{Result, UserError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A trained GPT-2 run: its id (or any unique part of it) under
    /// --runs-dir, or its directory.
    #[arg(required_unless_present = "model", conflicts_with = "model")]
    pub run: Option<PathBuf>,
    #[command(flatten)]
    pub runs_dir: super::runs::RunsDir,
    /// A Hugging Face model directory, as hf:DIR (config.json,
    /// model.safetensors or its shards, tokenizer.json).
    #[arg(long)]
    pub model: Option<String>,
    /// The text to continue (default: empty, an unconditional sample).
    #[arg(long, default_value = "")]
    pub prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 200)]
    pub tokens: usize,
    /// Above 0 samples at this temperature, 0 is greedy. Default: the
    /// checkpoint's generation_config.json (do_sample, temperature), else
    /// greedy, as transformers' generate.
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Keep the K most likely tokens when sampling (0 = off). Default: the
    /// checkpoint's generation_config.json, else transformers' 50.
    #[arg(long = "top-k", value_name = "K")]
    pub top_k: Option<usize>,
    /// Nucleus when sampling: the most likely tokens whose probability
    /// reaches P (1 = off). Default: generation_config.json, else 1.
    #[arg(long = "top-p", value_name = "P")]
    pub top_p: Option<f32>,
    /// Stop once the continuation contains this text (Llama-family --model
    /// only; repeatable). The checkpoint's end-of-sequence ids, and with
    /// --chat the template's end of turn, always stop it.
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Send --prompt as the user's turn through the checkpoint's chat
    /// template (--model only), as transformers' apply_chat_template with
    /// add_generation_prompt=True does.
    #[arg(long, requires = "model")]
    pub chat: bool,
    /// A system turn before the user's (--chat only).
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    /// Seed of the sampling: the same seed, the same text.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Continue the prompt N times in one batch, as RFT's sampling does
    /// (row i draws from seed (--seed, i); --model with a Llama-family
    /// checkpoint only). The timing in --json covers the whole batch.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = super::run::at_least_one)]
    pub batch: usize,
    /// One JSON object: prompt, prompt_tokens, text, tokens, finish (of the
    /// first row), decoding (each setting's value and where it came from:
    /// flag, generation_config.json, config.json or transformers default),
    /// and with --model: rows, generated_tokens, generate_s, tokens_per_s
    /// (the batch's new tokens over generation time, loading excluded).
    #[arg(long)]
    pub json: bool,
}

pub fn execute(args: Args) -> Result<i32> {
    // NaN and negative temperatures were taken as greedy (issue #40).
    let asked = Sampling {
        temperature: args.temperature.unwrap_or(0.0),
        top_k: 0,
        top_p: args.top_p.unwrap_or(1.0),
    };
    if let Some((key, value, fix)) = asked.problem() {
        return Err(
            UserError::usage(format!("--{} {value} is not usable", key.replace('_', "-")))
                .with_fix(fix)
                .into(),
        );
    }
    if args.batch > 1 && args.model.is_none() {
        return Err(UserError::usage(
            "--batch applies to Hugging Face Llama-family checkpoints (--model hf:DIR)",
        )
        .with_fix("drop --batch when sampling a run directory")
        .into());
    }
    match (&args.model, &args.run) {
        (Some(spec), _) => {
            let dir = pretrained::dir_of(spec, "--model")?;
            sample_pretrained(&dir, &args)
        }
        (None, Some(run)) => {
            let dir = crate::runs::store::resolve(run, &args.runs_dir.dir)?;
            sample_run(&dir, &args)
        }
        // clap requires one of them; kept as an error rather than a panic.
        (None, None) => Err(UserError::usage("give RUN_DIR or --model hf:DIR")
            .with_fix("e.g. envgen sample --model hf:./SmolLM2-360M-Instruct --prompt 'Hi'")
            .into()),
    }
}

fn sample_run(run: &Path, args: &Args) -> Result<i32> {
    if !args.stop.is_empty() {
        return Err(UserError::usage(
            "--stop applies to Llama-family checkpoints (--model hf:DIR) only",
        )
        .with_fix("drop --stop with a run directory")
        .into());
    }
    // A run directory has no generation_config.json: transformers' defaults.
    let decoding = decoding(&CheckpointGeneration::default(), args)?;
    let config: Gpt2Config = eval::run_config(run)?;
    let weights = eval::run_weights(run)?;
    let device = Default::default();
    let model = hf::load(config.model.init::<Cpu>(&device), &weights)?;
    // The tokenizer alone: never the training set (shards can be terabytes).
    let tokenizer = data::tokenizer_of(&config.data)?;
    let prompt = tokenizer.encode(&args.prompt);
    check_sequence_memory(&run.display().to_string(), prompt.len(), args.tokens)?;
    let out = gpt2::sample(
        &model,
        &config.model,
        &prompt,
        gpt2::SampleOptions {
            tokens: args.tokens,
            sampling: decoding.sampling(),
            seed: args.seed,
            // The embedding's padding rows (GPT-2: 50,257 → 50,304) are
            // never sampled.
            vocab_limit: Some(tokenizer.vocab_size()),
        },
        &device,
    )
    .map_err(|e| e.context(format!("sampling {}", run.display())))?;
    let text = tokenizer.decode(&out);
    if args.json {
        let doc = json!({"prompt": args.prompt, "text": text, "tokens": out,
            "decoding": decoding.to_json()});
        crate::output::outln!("{doc}");
    } else {
        crate::output::outln!("{}{}", args.prompt, text);
    }
    Ok(0)
}

/// A Hugging Face checkpoint: prints the continuation only (its text is
/// decoded from the new tokens alone, which the prompt's text need not
/// prefix exactly once a tokenizer normalizes).
fn sample_pretrained(dir: &Path, args: &Args) -> Result<i32> {
    let device = Default::default();
    let model = pretrained::load::<Cpu>(dir, &device)?;
    let tokenizer = pretrained::tokenizer(dir, &model)?;
    let decoding = decoding(&CheckpointGeneration::read(dir)?, args)?;
    let mut stop_ids = decoding.eos_token_ids.value.clone();
    let mut stop_strings = args.stop.clone();
    let prompt = if args.chat {
        let template = pretrained::ChatTemplate::load(dir)?.ok_or_else(|| {
            UserError::usage(format!(
                "{} has no chat template (chat_template.jinja or chat_template in tokenizer_config.json)",
                dir.display()
            ))
            .with_fix("drop --chat for a base model, or use the instruct checkpoint")
        })?;
        let mut messages = Vec::new();
        if let Some(system) = &args.system {
            messages.push(pretrained::Message::new("system", system));
        }
        messages.push(pretrained::Message::new("user", &args.prompt));
        // The answer ends with the turn (or eos), never at a newline.
        let turn_end = TurnEnd::of(&tokenizer, &template.end_of_turn(args.system.as_deref())?);
        stop_ids = turn_end.stop_ids(&stop_ids);
        stop_strings.extend(turn_end.stop_strings());
        tokenizer.encode_plain(&template.render(&messages, true)?)?
    } else {
        tokenizer.encode(&args.prompt)?
    };
    let prompt_tokens = prompt.clone();
    let started = Instant::now();
    let (rows, finish) = match &model {
        Pretrained::Llama(model) => {
            let cfg = model.config();
            let mut prompt = prompt;
            if prompt.is_empty() {
                // Nothing to condition on: start from BOS, as transformers does.
                prompt.extend(cfg.bos_token_id);
            }
            let opts = GenerateOptions {
                max_new_tokens: args.tokens,
                sampling: decoding.sampling(),
                seed: args.seed,
                eos_token_ids: stop_ids,
                stop_strings,
                row_seeds: Vec::new(),
            };
            // The batch's cache and logits, before a row is allocated.
            let length = prompt.len().saturating_add(args.tokens);
            let part = llama::generate::memory_part(cfg, args.batch, length, "--batch");
            let weights = cfg.memory_part();
            envgen_experiments::engine::budget::check(&spec_of(dir), &[weights, part])
                .map_err(|e| e.with_fix("lower --batch or --tokens"))?;
            let decode = |ids: &[u32]| tokenizer.decode(ids);
            let prompts = vec![prompt; args.batch];
            let out = llama::generate(model, &prompts, &opts, Some(&decode), &device)?;
            let finish = out.first().map_or("length", |g| g.finish.name());
            (out.into_iter().map(|g| g.tokens).collect(), finish)
        }
        Pretrained::Gpt2 { config, model } => {
            if args.batch > 1 {
                return Err(
                    UserError::usage("--batch applies to Llama-family checkpoints only")
                        .with_fix("drop --batch for a GPT-2 checkpoint")
                        .into(),
                );
            }
            if !args.stop.is_empty() {
                return Err(
                    UserError::usage("--stop applies to Llama-family checkpoints only")
                        .with_fix("drop --stop for a GPT-2 checkpoint")
                        .into(),
                );
            }
            if let Some(&t) = prompt.iter().find(|&&t| t as usize >= config.vocab_size) {
                return Err(UserError::usage(format!(
                    "the prompt holds token {t}, outside the model's vocab_size {} ({})",
                    config.vocab_size,
                    dir.join("config.json").display()
                ))
                .with_fix(
                    "put the tokenizer.json the checkpoint was trained with into the directory",
                )
                .into());
            }
            check_sequence_memory(&spec_of(dir), prompt.len(), args.tokens)?;
            let out = gpt2::sample(
                model,
                config,
                &prompt,
                gpt2::SampleOptions {
                    tokens: args.tokens,
                    sampling: decoding.sampling(),
                    seed: args.seed,
                    vocab_limit: None,
                },
                &device,
            )?;
            // What follows the first stop id is what generate would not
            // have produced: the tokens before it do not depend on it.
            match out.iter().position(|t| stop_ids.contains(t)) {
                Some(at) => (vec![out[..=at].to_vec()], "eos"),
                None => (vec![out], "length"),
            }
        }
    };
    let generate_s = started.elapsed().as_secs_f64();
    let texts: Vec<String> = rows.iter().map(|t| tokenizer.decode(t)).collect();
    if args.json {
        let generated: usize = rows.iter().map(Vec::len).sum();
        let doc = json!({"prompt": args.prompt, "prompt_tokens": prompt_tokens,
            "text": texts[0], "tokens": rows[0], "finish": finish,
            "decoding": decoding.to_json(),
            "rows": rows.len(), "generated_tokens": generated,
            "generate_s": generate_s, "tokens_per_s": generated as f64 / generate_s});
        crate::output::outln!("{doc}");
    } else if texts.len() == 1 {
        crate::output::outln!("{}", texts[0]);
    } else {
        for (i, text) in texts.iter().enumerate() {
            crate::output::outln!("--- row {i} ---\n{text}");
        }
    }
    Ok(0)
}

/// The decoding of this call: the flags over `checkpoint`'s
/// generation_config.json over transformers' defaults, said on stderr
/// (`-q` silences it). `--top-k`/`--top-p` on a greedy decoding would do
/// nothing, so they are refused.
fn decoding(checkpoint: &CheckpointGeneration, args: &Args) -> Result<Decoding> {
    let asked = Asked {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
    };
    let decoding = checkpoint.decoding(&asked);
    if !decoding.do_sample.value && (args.top_k.is_some() || args.top_p.is_some()) {
        return Err(UserError::usage(format!(
            "--top-k/--top-p only shape sampling, and this call is greedy (do_sample false: {})",
            decoding.do_sample.from.name()
        ))
        .with_fix("add --temperature T (above 0) to sample, or drop --top-k/--top-p")
        .into());
    }
    crate::output::notice!("envgen: sample: {}", decoding.describe());
    Ok(decoding)
}

/// GPT-2 sampling keeps the whole sequence (prompt and `--tokens` new
/// ones) as u32 ids, and each step's context as i64: refused before the
/// model runs when that cannot fit (`--tokens 1e12` aborted on allocation,
/// issue #40).
fn check_sequence_memory(origin: &str, prompt: usize, tokens: usize) -> Result<()> {
    let ids = prompt as f64 + tokens as f64;
    let part = envgen_experiments::engine::budget::Part::data("--tokens", tokens, ids * 12.0);
    envgen_experiments::engine::budget::check(origin, &[part])
        .map_err(|e| e.with_fix("lower --tokens"))?;
    Ok(())
}

/// `hf:DIR`, as the flag named it, for messages.
fn spec_of(dir: &Path) -> String {
    format!("{}{}", pretrained::PREFIX, dir.display())
}
