//! The sha256 of the bytes an image's inputs are pinned by: rendered files
//! and profiles in the lock, a requirements file and its wheels, the envgen
//! binary an image carries.

use sha2::{Digest as _, Sha256};

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
