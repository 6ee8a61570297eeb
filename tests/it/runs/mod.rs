//! Run directories after the fact: list, show, cancel, watch, report,
//! TensorBoard, tune.

pub mod report_cli;
pub mod runs_cli;
pub mod runs_ux;
pub mod runs_watch;
pub mod tensorboard_cli;
pub mod tune_cli;
