//! The bundled experiments, by name (`gpt2`, `hrm-sudoku`, `rft`,
//! `quantize`): the one place that knows them all. What an experiment is
//! lives below, in [`crate::experiment`] (re-exported here).

pub use crate::experiment::*;

use crate::error::UserError;

/// Every experiment in this build, in the order `experiments list` shows.
static ALL: &[&dyn Experiment] = &[
    &crate::gpt2::GPT2,
    &crate::hrm::run::HRM,
    &crate::rft::run::RFT,
    &crate::quant::run::QUANTIZE,
];

pub fn all() -> &'static [&'static dyn Experiment] {
    ALL
}

/// The experiment called `name`, or a usage error listing the known ones.
pub fn find(name: &str) -> anyhow::Result<&'static dyn Experiment> {
    all()
        .iter()
        .copied()
        .find(|e| e.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = all().iter().map(|e| e.name()).collect();
            UserError::usage(format!("unknown experiment `{name}`"))
                .with_fix(format!("pick one of: {}", names.join(", ")))
                .into()
        })
}
