mod fill_reader;
mod full_reader;
mod partial_reader;
mod shared;

pub use fill_reader::*;
pub use full_reader::*;
pub use partial_reader::*;
pub use shared::*;
