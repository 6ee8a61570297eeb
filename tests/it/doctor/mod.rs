//! `envgen doctor`: its parsers, knowledge base, verdicts and answers, on
//! recorded `nvidia-smi` hosts and the stand-in NVML.

pub mod doctor_answer;
pub mod doctor_cli;
pub mod doctor_kb;
pub mod doctor_parsers;
pub mod nvml_standin;
