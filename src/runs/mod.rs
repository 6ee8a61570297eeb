//! Reading run directories (written by the experiments crate, layout in
//! docs/cli.md) and answering questions across them: compare, report.

pub mod compare;
pub mod gpu_sampler;
pub mod report;
pub mod store;
