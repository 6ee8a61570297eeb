//! Edges that read the host into a [`crate::host::Host`]. (Issue #2.)
