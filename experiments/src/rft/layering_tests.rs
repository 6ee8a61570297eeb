//! No module of `rft/` uses another in a circle (issue #41): every
//! `super::…` and `crate::rft::…` path in a file's code (its test module
//! left out: tests sit on top of what they test) is an edge from the file's
//! module to the longest module that path names, and the edges form no
//! cycle. `tests/it/layering.rs` checks `src/`'s layers the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name (`family/gpt`, `config`; `` for `rft` itself) → source.
fn sources(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap().with_extension("");
            let rel = rel.to_string_lossy().replace('\\', "/");
            let name = match rel.strip_suffix("mod") {
                Some(dir) => dir.trim_end_matches('/').to_string(),
                None => rel,
            };
            out.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// The code of `src` before its test module, without comment lines.
fn code(src: &str) -> String {
    let lib = src.split("#[cfg(test)]").next().unwrap_or_default();
    lib.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths after each `prefix` in `code`, `a::{b, c::d}` as `a::b`, `a::c::d`.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let rest = &code[at + prefix.len()..];
        let head: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let after = &rest[head.len()..];
        match after.strip_prefix('{') {
            Some(group) if head.is_empty() || head.ends_with("::") => {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for item in group.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    out.push(format!("{head}{item}"));
                }
            }
            _ => out.push(head),
        }
    }
    out
}

/// The longest module of `known` that `path` (from module `base`) names.
fn target(base: &str, path: &str, known: &BTreeSet<String>) -> String {
    let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
    (1..=parts.len())
        .rev()
        .map(|k| {
            let mut name = base.to_string();
            for part in &parts[..k] {
                if !name.is_empty() {
                    name.push('/');
                }
                name.push_str(part);
            }
            name
        })
        .find(|name| known.contains(name))
        .unwrap_or_else(|| base.to_string())
}

fn parent(module: &str) -> &str {
    module.rsplit_once('/').map_or("", |(p, _)| p)
}

#[test]
fn rft_modules_use_each_other_without_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/rft");
    let mut files = BTreeMap::new();
    sources(&root, &root, &mut files);
    let known: BTreeSet<String> = files.keys().cloned().collect();
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (module, src) in &files {
        let code = code(src);
        let mut to = BTreeSet::new();
        for path in paths_after(&code, "crate::rft::") {
            to.insert(target("", &path, &known));
        }
        for path in paths_after(&code, "super::") {
            // `super::super::` is not used in rft/; a file's `super` is its parent.
            to.insert(target(parent(module), &path, &known));
        }
        to.remove(module.as_str());
        to.remove("");
        edges.insert(module, to);
    }
    assert!(
        edges["config"].contains("model_path"),
        "the scan reads config.rs's imports: {edges:?}"
    );
    // Depth-first search; a module met again while on the stack closes a cycle.
    fn visit<'a>(
        module: &'a str,
        edges: &'a BTreeMap<&str, BTreeSet<String>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if let Some(at) = stack.iter().position(|m| *m == module) {
            panic!("rft modules use each other in a circle: {:?}", {
                let mut cycle = stack[at..].to_vec();
                cycle.push(module);
                cycle
            });
        }
        if !done.insert(module) {
            return;
        }
        stack.push(module);
        for next in edges.get(module).into_iter().flatten() {
            visit(next, edges, stack, done);
        }
        stack.pop();
    }
    let mut done = BTreeSet::new();
    for module in edges.keys() {
        visit(module, &edges, &mut Vec::new(), &mut done);
    }
}
