//! `envgen run rft`: the recipe from scratch and from GPT-2 and Llama
//! checkpoints, chat templates.

pub mod rft_chat;
pub mod rft_cli;
pub mod rft_gpt2_hf;
pub mod rft_llama;
