//! The compatibility knowledge base (`env/*.toml`, embedded at build time)
//! and the pure verdict engine over it. (Issue #2 fills this in.)
