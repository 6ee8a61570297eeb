//! A run's life after it was started, in its place's terms: whether it
//! still trains (`runs list`/`show`, through [`liveness`](super::liveness))
//! and how to stop it (`runs cancel`, through [`cancel`](super::cancel)).
//! Each place implements [`RunLife`] in its own file; [`super::life_of`]
//! is the one `match` on [`Place`](crate::runs::place::Place) that picks
//! it, so nothing else compares places.

use std::path::Path;

use envgen_experiments::engine::Summary;

use super::liveness::{Checker, Liveness};
use crate::error::Result;
use crate::runs::lock::LockState;
use crate::runs::manifest::Manifest;

/// What a place knows about a run it was given.
pub trait RunLife {
    /// Whether the run in `dir` — no final summary, and no process holds
    /// its lock (`lock` says how the lock was found) — still trains here.
    fn liveness(
        &self,
        checker: &mut Checker,
        dir: &Path,
        manifest: &Manifest,
        lock: LockState,
    ) -> Liveness;

    /// Stop a run that trains here the way Ctrl-C would (it checkpoints
    /// and writes an `interrupted` summary); the summary it ended with.
    fn stop(&self, checker: &mut Checker, dir: &Path, manifest: &Manifest) -> Result<Summary>;

    /// Remove what a lost run left behind here (a container); by default nothing.
    fn clear_lost(&self, _checker: &mut Checker, _dir: &Path, _manifest: &Manifest) {}
}
