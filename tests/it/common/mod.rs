//! Helpers shared by the test modules.

pub mod docker_base;
pub mod doctor;
pub mod experiment;
pub mod run;
pub mod turns;

pub(crate) use turns::turn;
