//! How a pretrained checkpoint is shown a question (`task.prompt_format`).
//!
//! * `plain`: the text the byte-level GPT reads, `Q\nA: ` (encoded with the
//!   special tokens the tokenizer adds), and the completion ends with the
//!   end-of-completion newline.
//! * `chat`: an instruct checkpoint was trained on conversations, so the
//!   question goes in as the user turn of its chat template with the
//!   generation prompt (`apply_chat_template(..., add_generation_prompt=True)`),
//!   after an optional system turn, and the completion is trained to end with
//!   what closes the assistant's turn in that template (`<|im_end|>` for
//!   SmolLM2), which the model then emits to stop.
//!
//! Either way the loss covers the completion and its end only
//! (`super::completion::CompletionBatch`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::completion::Tokenized;
use super::config::{PromptFormat, TaskConfig};
use super::model_path::template_of;
use super::task::{format_prompt, Question, END_OF_COMPLETION, SEPARATOR};
use crate::pretrained::chat::TurnEnd;
use crate::pretrained::{ChatTemplate, HfTokenizer, Message};

/// Turns questions into the checkpoint's tokens, as `task.prompt_format` says.
pub struct Prompter<'a> {
    tokenizer: &'a HfTokenizer,
    chat: Option<Chat>,
}

struct Chat {
    template: ChatTemplate,
    system: Option<String>,
    /// Worked examples as earlier turns (`task.few_shot`): (question, answer).
    shots: Vec<(String, String)>,
    /// What closes the assistant's turn (`<|im_end|>`).
    end_of_turn: String,
}

impl Chat {
    /// The conversation of `question`: open for the model to answer
    /// (`answer` None, with the generation prompt) or answered.
    fn render(&self, question: &str, answer: Option<&str>) -> anyhow::Result<String> {
        let mut messages = Vec::with_capacity(3 + 2 * self.shots.len());
        if let Some(system) = &self.system {
            messages.push(Message::new("system", system));
        }
        for (shot_question, shot_answer) in &self.shots {
            messages.push(Message::new("user", shot_question));
            messages.push(Message::new("assistant", shot_answer));
        }
        messages.push(Message::new("user", question));
        if let Some(answer) = answer {
            messages.push(Message::new("assistant", answer));
        }
        self.template.render(&messages, answer.is_none())
    }
}

impl<'a> Prompter<'a> {
    /// The prompter of `task` for the checkpoint in `dir`, whose tokenizer
    /// is `tokenizer`.
    pub fn new(tokenizer: &'a HfTokenizer, dir: &Path, task: &TaskConfig) -> anyhow::Result<Self> {
        let chat = match task.prompt_format {
            PromptFormat::Plain => None,
            PromptFormat::Chat => {
                let shots = match task.few_shot {
                    0 => Vec::new(),
                    n => task.split()?.train[..n]
                        .iter()
                        .map(|q| (q.text.clone(), q.completion().trim_end().to_string()))
                        .collect(),
                };
                let template = template_of(dir)?;
                let end_of_turn = template.end_of_turn(task.system_prompt.as_deref())?;
                Some(Chat {
                    template,
                    system: task.system_prompt.clone(),
                    shots,
                    end_of_turn,
                })
            }
        };
        Ok(Self { tokenizer, chat })
    }

    pub fn tokenizer(&self) -> &HfTokenizer {
        self.tokenizer
    }

    /// The text the prompt's tokens are made of. `prompt` is a
    /// [`Question::prompt`] (`Q\nA: `): the samplers hand every model the
    /// same text rows, and a chat's user turn is the question alone.
    fn prompt_text(&self, prompt: &str) -> anyhow::Result<String> {
        match &self.chat {
            None => Ok(prompt.to_string()),
            Some(chat) => chat.render(prompt.strip_suffix(SEPARATOR).unwrap_or(prompt), None),
        }
    }

    /// The tokens generation continues for `prompt` (a [`Question::prompt`]).
    pub fn prompt_ids(&self, prompt: &str) -> anyhow::Result<Vec<u32>> {
        let text = self.prompt_text(prompt)?;
        match self.chat {
            // The tokenizer's own special tokens (a BOS), as `tokenizer(text)`.
            None => self.tokenizer.encode(&text),
            // A template writes its special tokens itself.
            Some(_) => self.tokenizer.encode_plain(&text),
        }
    }

    /// What a completion is trained to end with.
    pub fn end_of_completion(&self) -> &str {
        self.chat
            .as_ref()
            .map_or(END_OF_COMPLETION, |c| c.end_of_turn.as_str())
    }

    /// A training example: the prompt of `question` as generation sees it,
    /// then `completion` and the end of completion, tokenized apart so the
    /// prompt's tokens are exactly those the model is prompted with.
    pub(crate) fn example(&self, question: &str, completion: &str) -> anyhow::Result<Tokenized> {
        let prompt = self.prompt_ids(&format_prompt(question))?;
        let text = format!("{}{}", completion.trim_end(), self.end_of_completion());
        Ok(Tokenized::new(prompt, self.tokenizer.encode_plain(&text)?))
    }

    /// The ids that end a generated completion: the checkpoint's
    /// end-of-sequence ids and, in chat, the end of turn when it is one
    /// token (a template's turn end need not be the eos of
    /// generation_config.json).
    pub fn stop_ids(&self, eos: &[u32]) -> Vec<u32> {
        match &self.chat {
            None => eos.to_vec(),
            Some(chat) => TurnEnd::of(self.tokenizer, &chat.end_of_turn).stop_ids(eos),
        }
    }

    /// The texts that end a generated completion besides [`Self::stop_ids`]:
    /// in plain format the end-of-completion newline (RFT's own answer
    /// format is one line, `super::task::END_OF_COMPLETION`); in chat none
    /// when the end of turn is one token (an instruct model's answer may
    /// span lines: a newline must not cut it), else the end of turn's text.
    pub fn stop_strings(&self) -> Vec<String> {
        match &self.chat {
            None => vec![END_OF_COMPLETION.to_string()],
            Some(chat) => TurnEnd::of(self.tokenizer, &chat.end_of_turn).stop_strings(),
        }
    }

    /// `stages/prompt.json`: how `question` (the first training question)
    /// reaches the model, ids included.
    pub fn record(&self, question: &Question, eos: &[u32]) -> anyhow::Result<PromptRecord> {
        let example = self.example(&question.text, &question.completion())?;
        let prompt = question.prompt();
        Ok(PromptRecord {
            format: if self.chat.is_some() {
                PromptFormat::Chat
            } else {
                PromptFormat::Plain
            },
            system_prompt: self.chat.as_ref().and_then(|c| c.system.clone()),
            template: self.chat.as_ref().map(|c| c.template.path().to_path_buf()),
            end_of_completion: self.end_of_completion().to_string(),
            stop_token_ids: self.stop_ids(eos),
            question: question.text.clone(),
            prompt: self.prompt_text(&prompt)?,
            completion: format!(
                "{}{}",
                question.completion().trim_end(),
                self.end_of_completion()
            ),
            prompt_ids: example.prompt_ids().to_vec(),
            completion_ids: example.completion_ids().to_vec(),
        })
    }
}

/// How questions reach the model in a pretrained run (`stages/prompt.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptRecord {
    pub format: PromptFormat,
    pub system_prompt: Option<String>,
    /// The chat template's file.
    pub template: Option<PathBuf>,
    /// What every completion is trained to end with.
    pub end_of_completion: String,
    /// Generation stops at these ids (and, in plain format, at the
    /// end-of-completion newline).
    pub stop_token_ids: Vec<u32>,
    /// The first training question, its prompt as text and as the ids
    /// generation starts from, and its worked answer (what the loss
    /// covers) as text and ids.
    pub question: String,
    pub prompt: String,
    pub completion: String,
    pub prompt_ids: Vec<u32>,
    pub completion_ids: Vec<u32>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::error::exit_code_of;
    use crate::pretrained::chat;
    use crate::rft::config::{load_config, RftConfig as RftConfigFor, PRESETS};
    use crate::rft::pretrained;

    /// SmolLM2-Instruct's template: ChatML with a default system turn.
    pub(crate) const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    /// The tiny Llama's config and byte tokenizer plus the ChatML tokens
    /// (257, 258) and, when `template`, a tokenizer_config.json with it.
    pub(crate) fn checkpoint(dir: &Path, template: Option<&str>) {
        pretrained::write_byte_tokenizer(dir).unwrap();
        let path = dir.join(crate::pretrained::tokenizer::FILE);
        let mut tok = tokenizers::Tokenizer::from_file(&path).unwrap();
        tok.add_special_tokens(&[
            tokenizers::AddedToken::from("<|im_start|>", true),
            tokenizers::AddedToken::from("<|im_end|>", true),
        ]);
        tok.save(&path, false).unwrap();
        let cfg = crate::llama::save::config_json(&pretrained::tiny_llama());
        std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
        if let Some(template) = template {
            let config = serde_json::json!({"eos_token": "<|im_end|>", "chat_template": template});
            std::fs::write(dir.join(chat::CONFIG_FILE), config.to_string()).unwrap();
        }
    }

    pub(crate) fn task(format: PromptFormat, system: Option<&str>) -> TaskConfig {
        let mut config = load_config(PRESETS[0].1, "preset tiny", &[])
            .unwrap()
            .science;
        config.task.prompt_format = format;
        config.task.system_prompt = system.map(str::to_string);
        config.task
    }

    pub(crate) fn question() -> Question {
        Question {
            text: "How many grams are in 2 kilograms?".into(),
            reasoning: "1 kilogram = 1000 grams, so 2 * 1000 = 2000.".into(),
            answer: 2000.0,
            family: "mass".into(),
        }
    }

    /// Few-shot: the first training questions and their worked answers
    /// come as earlier user/assistant turns, in order, before the question;
    /// the end of turn is still found, and plain prompts refuse examples.
    #[test]
    fn few_shot_examples_are_earlier_turns_of_the_chat() {
        let dir = tempfile::tempdir().unwrap();
        checkpoint(dir.path(), Some(CHATML));
        let tok = HfTokenizer::load(dir.path(), false).unwrap();
        let mut task = task(PromptFormat::Chat, Some("S"));
        task.few_shot = 2;
        let prompter = Prompter::new(&tok, dir.path(), &task).unwrap();
        assert_eq!(prompter.end_of_completion(), "<|im_end|>");
        let split = task.split().unwrap();
        let turn = |role: &str, text: &str| format!("<|im_start|>{role}\n{text}<|im_end|>\n");
        let mut want = turn("system", "S");
        for shot in &split.train[..2] {
            want += &turn("user", &shot.text);
            want += &turn("assistant", shot.completion().trim_end());
        }
        let q = question();
        want += &turn("user", &q.text);
        want += "<|im_start|>assistant\n";
        assert_eq!(prompter.prompt_text(&q.prompt()).unwrap(), want);
        let e = prompter.example(&q.text, &q.completion()).unwrap();
        assert_eq!(e.prompt_ids(), tok.encode_plain(&want).unwrap());
        let err =
            load_config(PRESETS[0].1, "preset tiny", &["task.few_shot=2".into()]).unwrap_err();
        assert!(format!("{err:#}").contains("task.few_shot = 2"), "{err:#}");
        assert_eq!(crate::error::exit_code_of(&err), 2);
    }

    /// Plain: the prompt text and the completion with its newline, the
    /// tokens the plain path always fed (byte tokens: the bytes).
    #[test]
    fn plain_examples_are_the_prompt_then_the_completion_and_a_newline() {
        let dir = tempfile::tempdir().unwrap();
        checkpoint(dir.path(), Some(CHATML));
        let tok = HfTokenizer::load(dir.path(), false).unwrap();
        let prompter = Prompter::new(&tok, dir.path(), &task(PromptFormat::Plain, None)).unwrap();
        let q = question();
        let e = prompter.example(&q.text, &q.completion()).unwrap();
        let bytes = |s: &str| s.bytes().map(u32::from).collect::<Vec<_>>();
        assert_eq!(e.prompt_ids(), bytes(&q.prompt()));
        assert_eq!(e.completion_ids(), bytes(&q.completion()));
        assert_eq!(prompter.stop_ids(&[256]), vec![256]);
    }

    /// Chat: the user turn rendered with the generation prompt, the
    /// completion closed by the template's end of turn (found by rendering,
    /// not named anywhere), which also stops generation.
    #[test]
    fn chat_examples_end_with_the_templates_end_of_turn() {
        let dir = tempfile::tempdir().unwrap();
        checkpoint(dir.path(), Some(CHATML));
        let tok = HfTokenizer::load(dir.path(), false).unwrap();
        let q = question();
        for (system, opening) in [
            (
                None,
                "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n",
            ),
            (
                Some("Be brief."),
                "<|im_start|>system\nBe brief.<|im_end|>\n",
            ),
        ] {
            let prompter =
                Prompter::new(&tok, dir.path(), &task(PromptFormat::Chat, system)).unwrap();
            assert_eq!(prompter.end_of_completion(), "<|im_end|>");
            let want = format!(
                "{opening}<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
                q.text
            );
            assert_eq!(prompter.prompt_text(&q.prompt()).unwrap(), want);
            let e = prompter.example(&q.text, &q.completion()).unwrap();
            assert_eq!(e.prompt_ids(), tok.encode_plain(&want).unwrap());
            let answer = q.completion().trim_end().to_string();
            assert_eq!(
                e.completion_ids(),
                tok.encode_plain(&format!("{answer}<|im_end|>")).unwrap()
            );
            assert_eq!(e.completion_ids().last(), Some(&258));
            assert_eq!(prompter.stop_ids(&[256]), vec![256, 258]);
            let record = prompter.record(&q, &[256]).unwrap();
            assert_eq!(record.prompt_ids, e.prompt_ids());
            assert_eq!(record.system_prompt.as_deref(), system);
        }
    }

    /// Chat without a template, on the byte-level GPT or a random
    /// checkpoint, and a system prompt without chat: exit 2, by name.
    #[test]
    fn chat_is_refused_where_there_is_no_template() {
        let dir = tempfile::tempdir().unwrap();
        checkpoint(dir.path(), None);
        let spec = format!("model.init=hf:{}", dir.path().display());
        let tiny_llama = PRESETS.iter().find(|(n, _)| *n == "tiny-llama").unwrap().1;
        let cases: [(&str, Vec<String>, &str); 4] = [
            (
                tiny_llama,
                vec![spec.clone(), "task.prompt_format=chat".into()],
                "tokenizer_config.json",
            ),
            (
                tiny_llama,
                vec!["task.prompt_format=chat".into()],
                "random:tiny-llama",
            ),
            (
                PRESETS[0].1,
                vec!["task.prompt_format=chat".into()],
                "byte-level GPT",
            ),
            (
                tiny_llama,
                vec!["task.system_prompt=\"hi\"".into()],
                "task.system_prompt",
            ),
        ];
        for (text, overrides, says) in cases {
            let e = load_config(text, "preset", &overrides).expect_err("refused");
            assert_eq!(exit_code_of(&e), 2, "{e:#}");
            assert!(format!("{e:#}").contains(says), "{overrides:?}: {e:#}");
        }
        let e = load_config(
            tiny_llama,
            "preset",
            &[spec.clone(), "task.prompt_format=chat".into()],
        )
        .err()
        .unwrap();
        assert!(
            format!("{e:#}").contains(&dir.path().join(chat::TEMPLATE_FILE).display().to_string()),
            "{e:#}"
        );
        // With a template, chat and a system prompt are accepted and hashed.
        checkpoint(dir.path(), Some(CHATML));
        let overrides = [
            spec,
            "task.prompt_format=chat".into(),
            "task.system_prompt=\"hi\"".into(),
        ];
        let chat = load_config(tiny_llama, "preset", &overrides).unwrap();
        let plain = load_config(tiny_llama, "preset", &overrides[..1]).unwrap();
        let hash = |s: &RftConfigFor| crate::engine::config_hash(s).unwrap();
        assert_ne!(hash(&chat.science), hash(&plain.science));
        let text = crate::engine::config::to_canonical_toml(&plain.science).unwrap();
        assert!(!text.contains("prompt_format"), "{text}");
    }
}
