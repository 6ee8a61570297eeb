mod base;
mod blueprint;
mod cube_mapping;
mod error;
mod spec;
mod tiling_scheme;
mod vectorization;

pub use base::*;
pub use blueprint::*;
pub use cube_mapping::*;
// Internal-only — external crates import these directly from cubek-std.
pub(crate) use cubek_std::{StageIdent, SwizzleModes};
pub use error::*;
pub use spec::*;
pub use tiling_scheme::*;
pub use vectorization::*;
