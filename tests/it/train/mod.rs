//! The bundled experiments training for real on the CPU: GPT-2 (data, Hugging
//! Face interop, precision, ranks), Llama, HRM on Sudoku, quantization,
//! generation.

pub mod distributed_cli;
pub mod generate_bench;
pub mod gpt2_cli;
pub mod gpt2_data_cli;
pub mod gpt2_hf;
pub mod hrm_cli;
pub mod llama_hf;
pub mod precision_cli;
pub mod quantize_cli;
pub mod sampling_hf;
pub mod sudoku_cli;
