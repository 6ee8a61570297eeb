//! A checkpoint's chat template: the Jinja text in `chat_template.jinja`
//! or `tokenizer_config.json`'s `chat_template`, rendered with MiniJinja the
//! way transformers' `apply_chat_template(..., tokenize=False)` renders it
//! with Jinja2 (transformers/utils/chat_template_utils.py, read in the test
//! venv's transformers 5):
//!
//! - `trim_blocks` and `lstrip_blocks` on, loop controls (`break`,
//!   `continue`) on, a single trailing newline of the template dropped;
//! - the globals `raise_exception(msg)` (an error with the template's
//!   message) and `strftime_now(format)`; `namespace` and `dict` are
//!   MiniJinja built-ins;
//! - the variables `messages`, `add_generation_prompt` and the tokenizer's
//!   special tokens (`bos_token`, `eos_token`, …) as strings;
//! - Python's string and dict methods (`.strip()`, `.startswith()`,
//!   `.items()`) through minijinja-contrib's pycompat.
//!
//! Not covered: `tools`/`documents` (envgen passes none) and the exact
//! spacing of `tojson` (MiniJinja writes compact JSON, Python's `json.dumps`
//! puts a space after `,` and `:`), which only tool-calling templates use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::{Environment, Error, ErrorKind};
use serde::Serialize;
use serde_json::Value;

use super::HfTokenizer;
use crate::error::UserError;

/// Where transformers ≥ 4.43 saves the template (beside tokenizer.json).
pub const TEMPLATE_FILE: &str = "chat_template.jinja";
pub const CONFIG_FILE: &str = "tokenizer_config.json";

/// Instructions one render may run (MiniJinja's fuel): a real template
/// over a long conversation runs thousands; a nested `range(100000)` loop
/// runs billions and hung envgen (issue #40).
const FUEL: u64 = 20_000_000;
/// Bytes one render may write: a prompt far larger than any context.
const MAX_OUTPUT: usize = 16 << 20;

/// The special tokens transformers hands a template (`special_tokens_map`).
const SPECIAL_TOKENS: &[&str] = &[
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// One chat turn, as transformers' `{"role": …, "content": …}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Self {
        Self {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ChatTemplate {
    source: String,
    /// The file the template came from (for errors).
    path: PathBuf,
    special_tokens: BTreeMap<String, String>,
}

impl ChatTemplate {
    /// The template of the checkpoint in `dir`; `None` when it has none
    /// (base models usually ship without one).
    pub fn load(dir: &Path) -> anyhow::Result<Option<Self>> {
        let config_path = dir.join(CONFIG_FILE);
        // exists, not is_file: a FIFO or a link out is refused by the read,
        // not taken for an absent file.
        let config: Value = if config_path.exists() {
            read_json(&config_path)?
        } else {
            Value::Null
        };
        let special_tokens = SPECIAL_TOKENS
            .iter()
            .filter_map(|&key| Some((key.to_string(), token_text(&config[key])?)))
            .collect();
        let file = dir.join(TEMPLATE_FILE);
        let (source, path) = if file.exists() {
            let text = crate::fsutil::read_user_text(dir, &file, crate::fsutil::limit::TEXT)?;
            (text, file)
        } else {
            match template_in_config(&config, &config_path)? {
                Some(text) => (text, config_path),
                None => return Ok(None),
            }
        };
        Ok(Some(Self {
            source,
            path,
            special_tokens,
        }))
    }

    /// The file the template came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A special token's text as the template sees it (`"eos_token"`).
    pub fn special_token(&self, name: &str) -> Option<&str> {
        self.special_tokens.get(name).map(String::as_str)
    }

    /// The text of `messages` in the model's chat format; with
    /// `add_generation_prompt`, followed by the opening of the assistant's
    /// turn. A template's `raise_exception` is a usage error quoting it.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> anyhow::Result<String> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(python_method);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<String, Error> {
                Err(Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_function("strftime_now", strftime_now);
        env.set_fuel(Some(FUEL));
        let mut context: BTreeMap<&str, minijinja::Value> = self
            .special_tokens
            .iter()
            .map(|(k, v)| (k.as_str(), minijinja::Value::from(v.clone())))
            .collect();
        context.insert("messages", minijinja::Value::from_serialize(messages));
        context.insert(
            "add_generation_prompt",
            minijinja::Value::from(add_generation_prompt),
        );
        let mut out = Bounded(Vec::new());
        let rendered = env
            .template_from_str(&self.source)
            .and_then(|t| t.render_captured_to(context, &mut out).map(|_| ()));
        rendered.map_err(|e| -> anyhow::Error {
            let path = self.path.display();
            let (what, fix) = match e.kind() {
                ErrorKind::OutOfFuel => (
                    format!("{path}: the chat template ran more than {FUEL} instructions (a loop without end)"),
                    "give the chat template the checkpoint was published with",
                ),
                ErrorKind::WriteFailure => (
                    format!("{path}: the chat template wrote more than {MAX_OUTPUT} bytes"),
                    "give the chat template the checkpoint was published with",
                ),
                // MiniJinja's size limits (vendor/PATCHES.md, M2).
                ErrorKind::InvalidOperation
                    if e.detail().is_some_and(|d| d.ends_with("is too large")) =>
                {
                    (
                        format!(
                            "{path}: the chat template builds a value too large to hold ({})",
                            e.detail().unwrap_or_default()
                        ),
                        "give the chat template the checkpoint was published with",
                    )
                }
                kind => {
                    let detail = match kind {
                        ErrorKind::InvalidOperation => e.detail().unwrap_or("").to_string(),
                        _ => format!("{e:#}"),
                    };
                    (
                        format!("{path}: the chat template refused the conversation: {detail}"),
                        "give the roles and turn order the model's template expects (usually system?, then user/assistant alternating)",
                    )
                }
            };
            UserError::usage(what).with_fix(fix).into()
        })?;
        String::from_utf8(out.0).map_err(|e| {
            UserError::usage(format!(
                "{}: the chat template wrote non-UTF-8 text: {e}",
                self.path.display()
            ))
            .into()
        })
    }
}

impl ChatTemplate {
    /// What the template writes after an assistant's content, found by
    /// rendering one answered conversation (after `system`, when given): it
    /// must continue the generation prompt with the content, and what
    /// follows (trailing whitespace dropped: the newline between turns is
    /// not the model's to emit) is the end of turn. A template that renders
    /// the answer otherwise (reformatted, or with reasoning blocks) falls
    /// back to its `eos_token`.
    pub fn end_of_turn(&self, system: Option<&str>) -> anyhow::Result<String> {
        const QUESTION: &str = "How many grams are in 2 kilograms?";
        const ANSWER: &str = "1 kilogram = 1000 grams, so 2 * 1000 = 2000. <answer>2000</answer>";
        let mut messages: Vec<Message> = system
            .map(|s| Message::new("system", s))
            .into_iter()
            .collect();
        messages.push(Message::new("user", QUESTION));
        let open = self.render(&messages, true)?;
        messages.push(Message::new("assistant", ANSWER));
        let answered = self.render(&messages, false)?;
        let after = answered
            .strip_prefix(open.as_str())
            .and_then(|rest| rest.strip_prefix(ANSWER))
            .map(str::trim_end)
            .filter(|end| !end.is_empty());
        if let Some(end) = after.or(self.special_token("eos_token")) {
            return Ok(end.to_string());
        }
        Err(UserError::usage(format!(
            "{}: cannot tell what ends the assistant's turn: an answered conversation does not continue the generation prompt with the answer, and no eos_token is given",
            self.path.display()
        ))
        .with_fix("give a template whose assistant turn is the generation prompt followed by the content (ChatML, Llama 3), or --set task.prompt_format=plain")
        .into())
    }
}

/// How generation notices the end of an assistant's turn: by its token
/// when the tokenizer has it as one (`<|im_end|>`), else by its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    Token(u32),
    Text(String),
}

impl TurnEnd {
    pub fn of(tokenizer: &HfTokenizer, end_of_turn: &str) -> Self {
        match tokenizer.encode_plain(end_of_turn).as_deref() {
            Ok([id]) => TurnEnd::Token(*id),
            _ => TurnEnd::Text(end_of_turn.to_string()),
        }
    }

    /// `eos` and the turn's token (a template's turn end need not be the
    /// eos of generation_config.json).
    pub fn stop_ids(&self, eos: &[u32]) -> Vec<u32> {
        let mut ids = eos.to_vec();
        if let TurnEnd::Token(id) = self {
            if !ids.contains(id) {
                ids.push(*id);
            }
        }
        ids
    }

    /// The turn's text when it is no single token; never a newline rule.
    pub fn stop_strings(&self) -> Vec<String> {
        match self {
            TurnEnd::Token(_) => Vec::new(),
            TurnEnd::Text(text) => vec![text.clone()],
        }
    }
}

/// A writer that refuses to grow past [`MAX_OUTPUT`]: a template that
/// writes without end stops with a write error instead of eating memory.
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_OUTPUT {
            return Err(std::io::Error::other(
                "the chat template's output is too large",
            ));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let text = crate::fsutil::read_user_text(dir, path, crate::fsutil::limit::JSON)?;
    serde_json::from_str(&text).map_err(|e| {
        UserError::usage(format!("{}: not JSON: {e}", path.display()))
            .with_fix("give the tokenizer_config.json the checkpoint was saved with")
            .into()
    })
}

/// A special token as a string: configs write either `"</s>"` or an
/// AddedToken object `{"content": "</s>", …}`.
fn token_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// `chat_template` of tokenizer_config.json: a string, or a list of
/// `{"name", "template"}` of which transformers uses "default".
fn template_in_config(config: &Value, path: &Path) -> anyhow::Result<Option<String>> {
    match &config["chat_template"] {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Array(named) => named
            .iter()
            .find(|t| t["name"] == "default")
            .and_then(|t| t["template"].as_str())
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| {
                UserError::usage(format!(
                    "{}: chat_template lists named templates but none named \"default\"",
                    path.display()
                ))
                .with_fix("name the template to use \"default\"")
                .into()
            }),
        other => Err(UserError::usage(format!(
            "{}: chat_template is {other}, expected a string",
            path.display()
        ))
        .with_fix("give the tokenizer_config.json the checkpoint was saved with")
        .into()),
    }
}

/// The largest string a template may build: MiniJinja's limit for `*`,
/// which vendor/minijinja applies to every operation that grows a string
/// (vendor/PATCHES.md, M2).
const MAX_STRING: usize = 100_000_000;

/// minijinja-contrib's Python methods, with the two that grow a string
/// (`.replace()`, `.join()`) held to [`MAX_STRING`] before they allocate:
/// `s.replace('a', s)` in a loop doubles `s` per instruction.
fn python_method(
    state: &minijinja::State,
    value: &minijinja::Value,
    method: &str,
    args: &[minijinja::Value],
) -> Result<minijinja::Value, Error> {
    if let Some(text) = value.as_str() {
        let grown = match (method, args) {
            ("replace", [old, new, ..]) => match (old.as_str(), new.as_str()) {
                (Some(old), Some(new)) if new.len() > old.len() => text
                    .matches(old)
                    .count()
                    .checked_mul(new.len() - old.len())
                    .and_then(|more| more.checked_add(text.len())),
                _ => Some(0),
            },
            ("join", [items, ..]) => joined_len(text.len(), items),
            _ => Some(0),
        };
        if !matches!(grown, Some(len) if len <= MAX_STRING) {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "string is too large",
            ));
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// The length of `separator.join(items)`, or None past [`MAX_STRING`]
/// (counted item by item, so an endless sequence stops early).
fn joined_len(separator: usize, items: &minijinja::Value) -> Option<usize> {
    let mut total = 0usize;
    for (i, item) in items.try_iter().ok()?.enumerate() {
        let len = item
            .as_str()
            .map_or_else(|| item.to_string().len(), str::len);
        total = total.checked_add(len + if i > 0 { separator } else { 0 })?;
        if total > MAX_STRING {
            return None;
        }
    }
    Some(total)
}

/// transformers' `strftime_now`: the local time in a C `strftime` format
/// (Llama 3.1's template writes today's date into the system turn).
/// libc's own strftime, so every directive means what Python's does on Linux.
fn strftime_now(format: String) -> Result<String, Error> {
    let invalid = |what: &str| Error::new(ErrorKind::InvalidOperation, what.to_string());
    let format = std::ffi::CString::new(format).map_err(|_| invalid("NUL in the format"))?;
    let mut buffer = vec![0u8; 256];
    // SAFETY: time/localtime_r fill the tm we own; strftime writes at most
    // buffer.len() bytes into the buffer and returns how many it wrote.
    let written = unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return Err(invalid("no local time"));
        }
        libc::strftime(
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            format.as_ptr(),
            &tm,
        )
    };
    buffer.truncate(written);
    String::from_utf8(buffer).map_err(|_| invalid("strftime wrote non-UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(dir: &Path, config: Value) -> ChatTemplate {
        std::fs::write(dir.join(CONFIG_FILE), config.to_string()).unwrap();
        ChatTemplate::load(dir).unwrap().expect("a template")
    }

    #[test]
    fn blocks_are_trimmed_and_special_tokens_and_methods_are_there() {
        let dir = tempfile::tempdir().unwrap();
        let t = template(
            dir.path(),
            serde_json::json!({
                "bos_token": {"content": "<s>", "special": true},
                "eos_token": "</s>",
                "chat_template": "{{ bos_token }}\n{% for m in messages %}\n  {% if m['role'] == 'user' %}\n[{{ m['content'].strip() }}]{{ eos_token }}\n  {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}>{% endif %}\n",
            }),
        );
        let messages = [Message::new("user", "  hi "), Message::new("user", "yo")];
        assert_eq!(
            t.render(&messages, true).unwrap(),
            "<s>\n[hi]</s>\n[yo]</s>\n>"
        );
        assert_eq!(
            t.render(&messages, false).unwrap(),
            "<s>\n[hi]</s>\n[yo]</s>\n"
        );
    }

    #[test]
    fn raise_exception_is_a_usage_error_quoting_the_template() {
        let dir = tempfile::tempdir().unwrap();
        let t = template(
            dir.path(),
            serde_json::json!({"chat_template": "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}{{ m.content }}{% endfor %}"}),
        );
        let e = t.render(&[Message::new("tool", "x")], true).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&e), 2);
        assert!(e.to_string().contains("no tools here"), "{e}");
        assert_eq!(t.render(&[Message::new("user", "x")], true).unwrap(), "x");
    }

    #[test]
    fn the_template_file_wins_and_named_lists_use_default() {
        let dir = tempfile::tempdir().unwrap();
        let t = template(
            dir.path(),
            serde_json::json!({"chat_template": [
                {"name": "tool_use", "template": "tools"},
                {"name": "default", "template": "plain"}]}),
        );
        assert_eq!(t.render(&[], false).unwrap(), "plain");
        std::fs::write(dir.path().join(TEMPLATE_FILE), "from file\n").unwrap();
        let t = ChatTemplate::load(dir.path()).unwrap().unwrap();
        // Jinja2 drops one trailing newline of the template, as does MiniJinja.
        assert_eq!(t.render(&[], false).unwrap(), "from file");
        std::fs::remove_file(dir.path().join(TEMPLATE_FILE)).unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), "{}").unwrap();
        assert!(ChatTemplate::load(dir.path()).unwrap().is_none());
        std::fs::write(dir.path().join(CONFIG_FILE), "{").unwrap();
        let e = ChatTemplate::load(dir.path()).unwrap_err();
        assert_eq!(crate::error::exit_code_of(&e), 2);
    }

    #[test]
    fn strftime_now_formats_the_current_date() {
        let year = strftime_now("%Y".into()).unwrap();
        assert_eq!(year.len(), 4);
        assert!(year.starts_with("20"), "{year}");
    }
}
