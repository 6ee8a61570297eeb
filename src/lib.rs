//! envgen as a library: the CLI in `main.rs` is a thin layer over these modules.
//!
//! Data flows one way: `probe` reads the host into a [`host::Host`], `compat`
//! turns host + image facts into verdicts, `image` builds and exports
//! container images, and the experiments crate runs the science.

pub mod cli;
pub mod compat;
pub mod error;
pub mod host;
pub mod image;
pub mod launch;
pub mod logging;
pub mod output;
pub mod probe;
pub mod profiles;
pub mod runs;
pub mod suggest;
pub mod tune;
pub mod warmup;
