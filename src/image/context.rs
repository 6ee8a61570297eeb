//! The build context: a small staging directory (Dockerfile, the envgen
//! binary, `.dockerignore`) packed into a deterministic tar — sorted entries,
//! fixed mtime, uid/gid 0, normalized modes — so the same inputs always give
//! the same bytes, and the COPY of the binary the same layer.
//!
//! bollard sends whatever tar it is given and does no `.dockerignore`
//! processing, so that is done here (Docker's rules: Go `filepath.Match`
//! patterns plus `**`, `!` re-includes, last match wins).

use std::path::Path;

use anyhow::Context as _;

use crate::error::Result;

/// The mtime every entry gets (1980-01-01, the ZIP epoch: any fixed value works,
/// this one is what other reproducible-build tools use too).
pub const FIXED_MTIME: u64 = 315_532_800;

/// One `.dockerignore` rule.
struct Rule {
    pattern: glob::Pattern,
    include: bool,
}

fn parse_dockerignore(text: &str) -> Vec<Rule> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| {
            let (include, pattern) = match line.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, line),
            };
            let pattern = pattern.trim_start_matches("./").trim_start_matches('/');
            glob::Pattern::new(pattern.trim_end_matches('/'))
                .ok()
                .map(|pattern| Rule { pattern, include })
        })
        .collect()
}

fn ignored(rules: &[Rule], relative: &str) -> bool {
    let options = glob::MatchOptions {
        require_literal_separator: true,
        ..Default::default()
    };
    let mut ignored = false;
    for rule in rules {
        // A pattern matching a parent directory excludes everything below it.
        let mut prefix = String::new();
        let mut hit = false;
        for part in relative.split('/') {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            if rule.pattern.matches_with(&prefix, options) {
                hit = true;
                break;
            }
        }
        if hit {
            ignored = !rule.include;
        }
    }
    ignored
}

/// Pack `dir` into a deterministic tar, honoring its `.dockerignore`
/// (`Dockerfile` and `.dockerignore` themselves are always sent, as Docker does).
pub fn pack(dir: &Path) -> Result<Vec<u8>> {
    let rules = match std::fs::read_to_string(dir.join(".dockerignore")) {
        Ok(text) => parse_dockerignore(&text),
        Err(_) => Vec::new(),
    };
    let mut entries = Vec::new();
    for entry in walkdir::WalkDir::new(dir).min_depth(1).sort_by_file_name() {
        let entry =
            entry.with_context(|| format!("walking the build context {}", dir.display()))?;
        let relative = entry
            .path()
            .strip_prefix(dir)
            .context("context entry outside the context")?
            .to_string_lossy()
            .replace('\\', "/");
        let always = relative == "Dockerfile" || relative == ".dockerignore";
        if !always && ignored(&rules, &relative) {
            continue;
        }
        entries.push((relative, entry));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut builder = tar::Builder::new(Vec::new());
    builder.mode(tar::HeaderMode::Deterministic);
    for (relative, entry) in entries {
        let meta = entry.metadata().context("reading context entry metadata")?;
        let mut header = tar::Header::new_gnu();
        header.set_mtime(FIXED_MTIME);
        header.set_uid(0);
        header.set_gid(0);
        if meta.is_dir() {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            builder.append_data(&mut header, format!("{relative}/"), std::io::empty())?;
        } else if meta.is_file() {
            use std::os::unix::fs::PermissionsExt;
            let executable = meta.permissions().mode() & 0o111 != 0;
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(if executable { 0o755 } else { 0o644 });
            header.set_size(meta.len());
            let file = std::fs::File::open(entry.path())
                .with_context(|| format!("reading {}", entry.path().display()))?;
            builder.append_data(&mut header, &relative, file)?;
        }
    }
    Ok(builder.into_inner()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tar_bytes: &[u8]) -> Vec<(String, u64, u32)> {
        let mut archive = tar::Archive::new(tar_bytes);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().display().to_string(),
                    h.mtime().unwrap(),
                    h.mode().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn context_is_deterministic_sorted_and_honors_dockerignore() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Dockerfile"), "FROM x\n").unwrap();
        std::fs::write(dir.path().join("b.txt"), "b").unwrap();
        std::fs::write(dir.path().join("a.def"), "a").unwrap();
        std::fs::create_dir(dir.path().join("cache")).unwrap();
        std::fs::write(dir.path().join("cache/big"), "x").unwrap();
        std::fs::write(dir.path().join("cache/keep"), "k").unwrap();
        std::fs::write(
            dir.path().join(".dockerignore"),
            "*.def\ncache\n!cache/keep\n",
        )
        .unwrap();
        let first = pack(dir.path()).unwrap();
        let listed = names(&first);
        let paths: Vec<&str> = listed.iter().map(|(p, _, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [".dockerignore", "Dockerfile", "b.txt", "cache/keep"]
        );
        assert!(listed.iter().all(|(_, mtime, _)| *mtime == FIXED_MTIME));
        // Touching files changes nothing.
        std::fs::write(dir.path().join("b.txt"), "b").unwrap();
        assert_eq!(first, pack(dir.path()).unwrap());
    }
}
