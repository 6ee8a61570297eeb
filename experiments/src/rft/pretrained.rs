//! RFT from a pretrained checkpoint: the `[model]` table's `init` key,
//! the checkpoint's fingerprint, and the random-init tiny Llama that the
//! `tiny-llama` preset creates (no download in CI).
//!
//! `[model]` is either the byte-level GPT's sizes (trained from scratch,
//! the `tiny` preset) or `init` alone:
//!
//! * `init = "hf:DIR"`: a Hugging Face directory (config.json,
//!   model.safetensors or shards, tokenizer.json) of the Llama family
//!   (`model_type` llama or qwen2: SmolLM2, Llama 2/3, Qwen2), loaded by
//!   `crate::llama`, tokenized by its own tokenizer.json; or of GPT-2
//!   (`model_type` gpt2), run on the GPT path (`super::family::gpt2`);
//! * `init = "random:tiny-llama"`: envgen writes a random-init tiny Llama
//!   with a byte-level tokenizer into `RUN_DIR/stages/base/` and then loads
//!   it through the very same `hf:` path.

use std::io::Read;
use std::ops::Deref;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::UserError;
use crate::gpt2::ModelConfig;
use crate::llama::config::{Rope, RopeScaling};
use crate::llama::{self, LlamaConfig};
use crate::pretrained;

/// The `random:` checkpoints envgen can make.
pub const RANDOM_SHAPES: [&str; 1] = ["tiny-llama"];
const RANDOM_PREFIX: &str = "random:";
/// `hub:OWNER/NAME`: a preset's way of naming the checkpoint it is made
/// for without downloading it; the run needs `hf:DIR` of a local copy.
const HUB_PREFIX: &str = "hub:";
/// The Hub checkpoints a preset names, with their size for the download
/// advice. SmolLM2-360M-Instruct: 361,821,120 parameters by config.json's
/// shapes (32 layers of width 960, 15 query / 5 key-value heads of 64,
/// SwiGLU 2560, 49,152 tokens, tied head), the Hub's file listing gives
/// model.safetensors as 724 MB (bf16, 2 bytes each).
const HUB_SIZES: &[(&str, &str)] = &[(
    "HuggingFaceTB/SmolLM2-360M-Instruct",
    "362M parameters, a 724 MB model.safetensors in bf16",
)];
const INIT_FIX: &str = "set model.init = \"hf:DIR\" (a Hugging Face Llama-family or GPT-2 directory, e.g. one from `huggingface-cli download HuggingFaceTB/SmolLM2-360M-Instruct --local-dir DIR`) or \"random:tiny-llama\"";

/// The `[model]` table of an rft config. Derefs to the GPT's sizes, which
/// only mean something without `init`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ModelTable", into = "ModelTable")]
pub struct RftModel {
    /// `hf:DIR` or `random:NAME`; None = the byte-level GPT below.
    pub init: Option<String>,
    pub gpt: ModelConfig,
    /// GPT keys written next to `init` (refused by [`RftModel::validate`]).
    conflicting: Vec<String>,
}

impl Deref for RftModel {
    type Target = ModelConfig;
    fn deref(&self) -> &ModelConfig {
        &self.gpt
    }
}

impl From<ModelConfig> for RftModel {
    fn from(gpt: ModelConfig) -> Self {
        Self {
            init: None,
            gpt,
            conflicting: Vec::new(),
        }
    }
}

/// `[model]` as written: every key optional, checked in `try_from`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelTable {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    init: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    n_layer: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    n_head: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    n_embd: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    block_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vocab_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dropout: Option<f64>,
}

impl TryFrom<ModelTable> for RftModel {
    type Error = String;
    fn try_from(t: ModelTable) -> Result<Self, String> {
        let sizes = [
            ("n_layer", t.n_layer),
            ("n_head", t.n_head),
            ("n_embd", t.n_embd),
            ("block_size", t.block_size),
            ("vocab_size", t.vocab_size),
        ];
        let mut conflicting: Vec<String> = sizes
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| format!("model.{k}"))
            .collect();
        if t.dropout.is_some_and(|d| d != 0.0) {
            conflicting.push("model.dropout".into());
        }
        if t.init.is_none() {
            if let Some((key, _)) = sizes.iter().find(|(_, v)| v.is_none()) {
                return Err(format!(
                    "[model] has no `{key}`: give the GPT's sizes (n_layer, n_head, n_embd, block_size, vocab_size), or model.init = \"hf:DIR\" to fine-tune a pretrained checkpoint"
                ));
            }
            conflicting.clear();
        }
        let get = |v: Option<usize>| v.unwrap_or(0);
        Ok(RftModel {
            init: t.init,
            gpt: ModelConfig {
                n_layer: get(t.n_layer),
                n_head: get(t.n_head),
                n_embd: get(t.n_embd),
                block_size: get(t.block_size),
                vocab_size: get(t.vocab_size),
                dropout: t.dropout.unwrap_or(0.0),
            },
            conflicting,
        })
    }
}

impl From<RftModel> for ModelTable {
    fn from(m: RftModel) -> Self {
        // With `init`, the GPT's sizes do not apply and are not recorded
        // (a conflicting config never gets past validation to be written).
        let gpt = m.init.is_none().then_some(&m.gpt);
        let size = |f: fn(&ModelConfig) -> usize| gpt.map(f);
        ModelTable {
            n_layer: size(|g| g.n_layer),
            n_head: size(|g| g.n_head),
            n_embd: size(|g| g.n_embd),
            block_size: size(|g| g.block_size),
            vocab_size: size(|g| g.vocab_size),
            dropout: gpt.map(|g| g.dropout).filter(|&d| d != 0.0),
            init: m.init,
        }
    }
}

/// Where a pretrained run's base checkpoint comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Init {
    Hf(PathBuf),
    Random(String),
}

impl RftModel {
    /// The checkpoint to start from; None for the byte-level GPT.
    pub fn checkpoint(&self) -> anyhow::Result<Option<Init>> {
        let Some(spec) = &self.init else {
            return Ok(None);
        };
        if let Some(name) = spec.strip_prefix(RANDOM_PREFIX) {
            if !RANDOM_SHAPES.contains(&name) {
                return Err(UserError::usage(format!(
                    "model.init = {spec:?}: envgen makes random checkpoints of the shapes {RANDOM_SHAPES:?}"
                ))
                .with_fix(INIT_FIX)
                .into());
            }
            return Ok(Some(Init::Random(name.to_string())));
        }
        if let Some(repo) = spec.strip_prefix(HUB_PREFIX) {
            return Err(hub_error(spec, repo).into());
        }
        if !spec.starts_with(pretrained::PREFIX) {
            return Err(UserError::usage(format!(
                "model.init = {spec:?} is neither hf:DIR nor random:NAME"
            ))
            .with_fix(INIT_FIX)
            .into());
        }
        Ok(Some(Init::Hf(pretrained::dir_of(spec, "model.init")?)))
    }

    /// The GPT's sizes, for code that handles only the byte-level GPT
    /// (`what` says which); a usage error for a pretrained-checkpoint run.
    pub fn gpt_only(&self, what: &str) -> anyhow::Result<&ModelConfig> {
        match &self.init {
            None => Ok(&self.gpt),
            Some(init) => Err(UserError::usage(format!(
                "{what} handles rft runs of the byte-level GPT; this run fine-tuned model.init = {init:?}"
            ))
            .with_fix("give an rft run without model.init (e.g. --preset tiny)")
            .into()),
        }
    }

    /// With `init`: a spec envgen reads, and no GPT key beside it.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.checkpoint()?.is_none() {
            return Ok(());
        }
        if !self.conflicting.is_empty() {
            let spec = self.init.as_deref().unwrap_or_default();
            return Err(UserError::usage(format!(
                "model.init = {spec:?} takes the model from the checkpoint, but [model] also sets {}",
                self.conflicting.join(", ")
            ))
            .with_fix(format!(
                "remove {} (or use --preset tiny-llama, whose [model] is init alone)",
                self.conflicting.join(", ")
            ))
            .into());
        }
        // The checkpoint's own files are its family's to check
        // (`super::model_path::ModelPath::check_checkpoint`).
        Ok(())
    }
}

/// `hub:REPO`: envgen does not download; the error says how to.
fn hub_error(spec: &str, repo: &str) -> UserError {
    let size = HUB_SIZES
        .iter()
        .find(|(name, _)| *name == repo)
        .map_or(String::new(), |(_, size)| format!(" ({size})"));
    UserError::usage(format!(
        "model.init = {spec:?} names the Hub checkpoint {repo}{size}, which envgen does not download"
    ))
    .with_fix(format!(
        "download it once with `huggingface-cli download {repo} --local-dir DIR`, then run with --set model.init=hf:DIR"
    ))
}

/// `dir` is a Llama-family checkpoint envgen fine-tunes (exit 2 otherwise).
pub fn check_dir(dir: &Path) -> anyhow::Result<LlamaConfig> {
    if !dir.join("config.json").is_file() && dir.is_dir() {
        return Err(UserError::usage(format!(
            "model.init: {} has no config.json",
            dir.display()
        ))
        .with_fix(format!(
            "point model.init at a Hugging Face model directory (save_pretrained writes config.json, model.safetensors, tokenizer.json); {INIT_FIX}"
        ))
        .into());
    }
    let kind = pretrained::model_type(dir).map_err(named)?;
    if kind == "gpt2" {
        // GPT-2 checkpoints are checked and run on the GPT path.
        return Err(UserError::usage(format!(
            "model.init: {} is a GPT-2 checkpoint, not a Llama-family one",
            dir.display()
        ))
        .with_fix("run the command again: a GPT-2 checkpoint takes the GPT path")
        .into());
    }
    let cfg = llama::config::read(dir).map_err(named)?;
    // Every file the run reads or copies that is there, by the rule for
    // files of a user directory (a stat each, no hashing), and the
    // tokenizer parsed: a bad one is refused here, before a run directory
    // exists, not at the run's start, which left a `failed` run directory
    // behind (issue #40). Missing files are the run's to name, as before.
    let names = [
        llama::hf::SINGLE,
        llama::hf::INDEX,
        "generation_config.json",
        pretrained::tokenizer::FILE,
        pretrained::chat::CONFIG_FILE,
        pretrained::chat::TEMPLATE_FILE,
        "special_tokens_map.json",
    ];
    super::files::check_files(dir, &names).map_err(named)?;
    if let Ok(shards) = llama::hf::weight_files(dir) {
        for shard in shards {
            crate::fsutil::user_file(dir, &shard, crate::fsutil::limit::WEIGHTS).map_err(named)?;
        }
    }
    if dir.join(pretrained::tokenizer::FILE).exists() {
        pretrained::HfTokenizer::load(dir, false).map_err(named)?;
    }
    Ok(cfg)
}

/// The shape of the Llama-family checkpoint `init` names, when readable.
pub(crate) fn llama_config(init: &Init) -> Option<LlamaConfig> {
    match init {
        Init::Hf(dir) => llama::config::read(dir).ok(),
        Init::Random(_) => Some(tiny_llama()),
    }
}

/// Parameters of the model `cfg` describes.
pub(crate) fn count_parameters(cfg: &LlamaConfig) -> u64 {
    let (d, hd, ff) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
    let (h, kvh, v) = (
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.vocab_size,
    );
    let bias = |on: bool, n: usize| if on { n } else { 0 };
    let attn = d * h * hd
        + 2 * d * kvh * hd
        + h * hd * d
        + bias(cfg.qkv_bias, (h + 2 * kvh) * hd)
        + bias(cfg.o_bias, d);
    let mlp = 3 * d * ff + bias(cfg.mlp_bias, 2 * ff + d);
    let layer = attn + mlp + 2 * d;
    let head = if cfg.tie_word_embeddings { 0 } else { v * d };
    (v * d + cfg.num_hidden_layers * layer + d + head) as u64
}

/// A checkpoint error as a `model.init` one: the key first, the fix kept.
pub(crate) fn named(e: anyhow::Error) -> anyhow::Error {
    match e.downcast::<UserError>() {
        Ok(mut user) => {
            user.message = format!("model.init: {}", user.message);
            user.fix.get_or_insert_with(|| INIT_FIX.to_string());
            user.into()
        }
        Err(e) => e,
    }
}

// ---------------------------------------------------------------------------
// The checkpoint's fingerprint: two different directories at one path are
// told apart in the run's records.

/// The files that make up the checkpoint in `dir`, in a fixed order.
pub fn checkpoint_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = vec![dir.join("config.json")];
    // The tokenizer config and the chat template decide what a chat
    // prompt is (`task.prompt_format`), so they are part of the input too.
    for extra in [
        "generation_config.json",
        crate::pretrained::tokenizer::FILE,
        crate::pretrained::chat::CONFIG_FILE,
        crate::pretrained::chat::TEMPLATE_FILE,
        llama::hf::INDEX,
    ] {
        // exists: a FIFO or a dangling link is refused by the read.
        if dir.join(extra).exists() || dir.join(extra).is_symlink() {
            files.push(dir.join(extra));
        }
    }
    files.extend(llama::hf::weight_files(dir)?);
    Ok(files)
}

/// sha256 over each checkpoint file's name, size and sha256.
pub fn fingerprint(dir: &Path) -> anyhow::Result<String> {
    let mut outer = Sha256::new();
    for path in checkpoint_files(dir)? {
        let mut file = crate::fsutil::open_user_file(dir, &path, crate::fsutil::limit::WEIGHTS)?;
        let mut inner = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            size += n as u64;
            inner.update(&buf[..n]);
        }
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        outer.update(format!("{name}\0{size}\0{}\n", hex::encode(inner.finalize())).as_bytes());
    }
    Ok(hex::encode(outer.finalize()))
}

// ---------------------------------------------------------------------------
// The random-init tiny Llama of the `tiny-llama` preset.

// The byte tokenizer lives with the other tokenizer files envgen writes
// (`envgen export hf` writes it too); its old paths stay.
pub use crate::pretrained::tokenizer_files::{write_byte_tokenizer, BYTE_EOS};

/// The `tiny-llama` shape: 2 layers of width 64, 4 query heads on 2
/// key/value heads (grouped-query attention, as SmolLM2-1.7B/Llama 3),
/// a tied head, over the byte tokenizer.
pub fn tiny_llama() -> LlamaConfig {
    LlamaConfig {
        model_type: "llama".into(),
        vocab_size: 257,
        hidden_size: 64,
        intermediate_size: 192,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 16,
        rms_norm_eps: 1e-5,
        max_position_embeddings: 512,
        rope: Rope {
            theta: 10_000.0,
            scaling: RopeScaling::None,
        },
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        tie_word_embeddings: true,
        bos_token_id: None,
        eos_token_ids: vec![256],
    }
}

/// Write the random checkpoint `name` (config.json, model.safetensors,
/// tokenizer.json) into `dir`, its weights drawn from `seed`.
pub fn write_random(name: &str, seed: u64, dir: &Path) -> anyhow::Result<()> {
    use crate::backend::Cpu;
    debug_assert_eq!(name, RANDOM_SHAPES[0]);
    let cfg = tiny_llama();
    crate::fsutil::create_dir_all(dir)?;
    let device = Default::default();
    // std 0.02, transformers' initializer_range.
    let model =
        llama::Llama::<Cpu>::build(&cfg, &mut llama::model::random_weights(seed, 0.02), &device)?;
    let json = serde_json::to_string_pretty(&llama::save::config_json(&cfg))?;
    crate::fsutil::write_atomic(&dir.join("config.json"), json.as_bytes())?;
    write_byte_tokenizer(dir)?;
    llama::save::save_safetensors(&model, &dir.join(llama::hf::SINGLE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Cpu;
    use crate::error::exit_code_of;

    fn table(text: &str) -> Result<RftModel, toml::de::Error> {
        toml::from_str(text)
    }

    /// A GPT `[model]` table is written back exactly as `ModelConfig`
    /// writes it, so configs without `init` keep their config_hash.
    #[test]
    fn a_gpt_table_serializes_as_before() {
        let text = "n_layer = 2\nn_head = 2\nn_embd = 64\nblock_size = 176\nvocab_size = 256\n";
        let model = table(text).unwrap();
        assert_eq!(model.checkpoint().unwrap(), None);
        let gpt: ModelConfig = toml::from_str(text).unwrap();
        assert_eq!(
            toml::Value::try_from(&model).unwrap(),
            toml::Value::try_from(&gpt).unwrap()
        );
        model.validate().unwrap();
        let e = table("n_layer = 2\n").unwrap_err();
        assert!(
            e.to_string().contains("n_head") && e.to_string().contains("model.init"),
            "{e}"
        );
    }

    /// `init` alone round-trips; GPT keys beside it are refused by name.
    #[test]
    fn init_is_recorded_and_gpt_keys_beside_it_are_refused() {
        let model = table("init = \"random:tiny-llama\"\n").unwrap();
        assert_eq!(
            model.checkpoint().unwrap(),
            Some(Init::Random("tiny-llama".into()))
        );
        let value = toml::Value::try_from(&model).unwrap();
        let want: toml::Value = toml::from_str("init = \"random:tiny-llama\"").unwrap();
        assert_eq!(value, want);
        model.validate().unwrap();
        let both = table("init = \"random:tiny-llama\"\nn_layer = 2\nn_embd = 64\n").unwrap();
        let e = both.validate().unwrap_err();
        assert_eq!(exit_code_of(&e), 2);
        assert!(e.to_string().contains("model.n_layer, model.n_embd"), "{e}");
        let e = model.gpt_only("envgen quant").unwrap_err();
        assert_eq!(exit_code_of(&e), 2);
    }

    /// The byte tokenizer gives each byte its own id (the byte's value)
    /// and decodes back to the text, UTF-8 included.
    #[test]
    fn the_byte_tokenizer_maps_each_byte_to_its_value() {
        let dir = tempfile::tempdir().unwrap();
        write_byte_tokenizer(dir.path()).unwrap();
        let tok = crate::pretrained::HfTokenizer::load(dir.path(), false).unwrap();
        let text = "How many grams are in 2 kilograms?\nA: é <answer>2000</answer>\n";
        let ids = tok.encode(text).unwrap();
        assert_eq!(ids, text.bytes().map(u32::from).collect::<Vec<_>>());
        assert_eq!(tok.decode(&ids), text);
        assert_eq!(tok.token_id(BYTE_EOS), Some(256));
    }

    /// A random checkpoint loads through the `hf:` path, and saving the
    /// loaded model writes the same bytes (names, layout, values).
    #[test]
    fn a_random_checkpoint_loads_and_saves_back_identically() {
        let dir = tempfile::tempdir().unwrap();
        write_random("tiny-llama", 3, dir.path()).unwrap();
        assert_eq!(check_dir(dir.path()).unwrap(), tiny_llama());
        let device = Default::default();
        let model = llama::hf::load::<Cpu>(dir.path(), &device).unwrap();
        let again = dir.path().join("again.safetensors");
        llama::save::save_safetensors(&model, &again).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join(llama::hf::SINGLE)).unwrap(),
            std::fs::read(&again).unwrap()
        );
        let before = fingerprint(dir.path()).unwrap();
        // A chat template decides what chat prompts are: it is hashed too.
        let template = dir.path().join(crate::pretrained::chat::TEMPLATE_FILE);
        std::fs::write(&template, "{{ messages[0]['content'] }}").unwrap();
        let with_template = fingerprint(dir.path()).unwrap();
        assert_ne!(with_template, before);
        std::fs::write(&template, "{{ messages[-1]['content'] }}").unwrap();
        assert_ne!(fingerprint(dir.path()).unwrap(), with_template);
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        assert_ne!(fingerprint(dir.path()).unwrap(), before);
    }
}
