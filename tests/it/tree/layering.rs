//! The shape of the crate stays as docs/architecture.md draws it: layers
//! point one way (cli → tune → launch → runs → image/probe → compat/profiles →
//! host/error). This reads every `crate::…` path in src/ (code and unit
//! tests, not comments) and fails naming the file, line and arrow that
//! points upward or sideways. Below that, no files import each other in a
//! circle (`no_import_circle_between_files`, in src/, experiments/src and
//! kernels/src).

use std::path::{Path, PathBuf};

/// Each top-level module's layer; a module may use only lower layers.
const LAYERS: &[(&str, u8)] = &[
    ("error", 0),
    ("logging", 0),
    ("output", 0),
    ("host", 0),
    ("suggest", 0),
    ("compat", 1),
    ("profiles", 1),
    ("probe", 2),
    ("image", 2),
    ("runs", 3),
    ("launch", 4),
    ("warmup", 4),
    ("tune", 5),
    ("cli", 6),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, l)| *l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of src/ belongs to (`src/launch/slurm/mod.rs` → `launch`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let first = file.strip_prefix(src).ok()?.components().next()?;
    let name = first.as_os_str().to_str()?.trim_end_matches(".rs");
    (name != "main" && name != "lib").then(|| name.to_string())
}

/// `(line, module)` for every `crate::module` a file names outside comments.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push((n + 1, name));
            } else if after.starts_with('{') {
                // `crate::{a, b}` would hide its modules: one per `use` here.
                found.push((n + 1, "{".to_string()));
            }
            rest = after;
        }
    }
    found
}

#[test]
fn no_module_imports_a_higher_or_sideways_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let own = layer(&module).unwrap_or_else(|| {
            panic!(
                "{}: module `{module}` has no layer in LAYERS",
                file.display()
            )
        });
        let text = std::fs::read_to_string(file).unwrap();
        for (line, used) in crate_paths(&text) {
            if used == module {
                continue;
            }
            checked += 1;
            match layer(&used) {
                Some(l) if l < own => {}
                Some(l) => wrong.push(format!(
                    "{}:{line}: {module} (layer {own}) uses crate::{used} (layer {l})",
                    file.strip_prefix(&src).unwrap().display()
                )),
                None => wrong.push(format!(
                    "{}:{line}: crate::{used} is not a module in LAYERS",
                    file.strip_prefix(&src).unwrap().display()
                )),
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} crate paths found: is src/ read?"
    );
    assert!(
        wrong.is_empty(),
        "imports against the layering (docs/architecture.md):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_checker_sees_an_upward_import() {
    let text = "use crate::cli::doctor; // crate::launch in a comment\nfn f() { crate::runs::x() }";
    assert_eq!(
        crate_paths(text),
        vec![(1, "cli".to_string()), (2, "runs".to_string())]
    );
}

/// Standard output goes through `crate::output` (a closed pipe is not a
/// panic): a bare `println!`/`print!` anywhere in src/ is named here.
#[test]
fn no_bare_println_in_src() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut bare = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let stripped = code.replace("eprintln!", "").replace("eprint!", "");
            if stripped.contains("println!") || stripped.contains("print!(") {
                bare.push(format!("{}:{}", file.display(), i + 1));
            }
        }
    }
    assert!(
        bare.is_empty(),
        "use crate::output::outln!/out! (no panic on a closed pipe):\n{}",
        bare.join("\n")
    );
}

// ---------------------------------------------------------------------------
// Import circles between files (issue #41): a file that uses another file
// which (directly or through others) uses it back is one concern split in
// two, or two concerns knotted together. The graph below has one node per
// file and one arrow per `use` or `crate::…`/`super::…` path in code; a
// `pub use` only forwards a name (a module's front door) and is followed to
// the file that defines the name instead of counting as an arrow itself.

use std::collections::{BTreeMap, BTreeSet};

/// Module path (`["image", "lock"]`) → its file, for one crate.
type Modules = BTreeMap<Vec<String>, PathBuf>;

/// The crate's modules, found by following `mod NAME;` declarations (and
/// their `#[path = "…"]`) from the root file.
fn crate_modules(root: &Path) -> Modules {
    let mut modules = Modules::new();
    let mut todo = vec![(Vec::<String>::new(), root.to_path_buf())];
    while let Some((module, file)) = todo.pop() {
        let text = code_only(&std::fs::read_to_string(&file).unwrap());
        let owns_dir = ["mod.rs", "lib.rs", "main.rs"]
            .iter()
            .any(|n| file.file_name().is_some_and(|f| f == *n));
        let dir = file.parent().unwrap();
        let child_dir = if owns_dir {
            dir.to_path_buf()
        } else {
            dir.join(file.file_stem().unwrap())
        };
        let mut path_attr: Option<String> = None;
        for line in text.lines().map(str::trim) {
            if let Some(p) = line.strip_prefix("#[path = \"") {
                path_attr = p.split('"').next().map(str::to_string);
                continue;
            }
            let decl = line
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub ");
            if let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.strip_suffix(';')) {
                let child = match path_attr.take() {
                    Some(p) => dir.join(p),
                    None if child_dir.join(format!("{name}.rs")).exists() => {
                        child_dir.join(format!("{name}.rs"))
                    }
                    None => child_dir.join(name).join("mod.rs"),
                };
                let mut path = module.clone();
                path.push(name.to_string());
                todo.push((path, child));
            } else if !line.starts_with("#[") {
                path_attr = None;
            }
        }
        modules.insert(module, file);
    }
    modules
}

/// The text with comments blanked (line comments; `/* */` is not used here).
fn code_only(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a `use` tree names: `a::{b, c::{self, D}}` → a::b, a::c, a::c::D.
fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
    fn expand(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        if let Some(inner) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            for part in split_top_level(inner) {
                expand(prefix, part, out);
            }
            return;
        }
        let (head, rest) = match tree.find("::") {
            Some(at) if !tree[..at].contains('{') => (&tree[..at], Some(&tree[at + 2..])),
            _ => (tree, None),
        };
        let head = head.split(" as ").next().unwrap().trim();
        let mut path = prefix.to_vec();
        match head {
            "self" | "*" => {}
            _ => path.push(head.to_string()),
        }
        match rest {
            Some(rest) => expand(&path, rest, out),
            None => out.push(path),
        }
    }
    let mut out = Vec::new();
    expand(&[], tree, &mut out);
    out
}

/// `a, {b, c}, d` split at the commas outside braces.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// One path a file names: its segments, whether it is a `pub use` (a
/// re-export, not an arrow), and how many inline `mod … {` blocks it sits in
/// (`super::` inside `mod tests {` is the file itself).
struct Named {
    path: Vec<String>,
    re_export: bool,
    inline_depth: usize,
}

/// Every `use` path and every `crate::`/`super::`/`self::` path in a file's code.
fn named_paths(text: &str) -> Vec<Named> {
    let code = code_only(text);
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = Vec::new();
    let (mut depth, mut inline_opens) = (0usize, Vec::<usize>::new());
    let mut i = 0;
    while i < bytes.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let at_word = i == 0 || (!is_ident(bytes[i - 1]) && bytes[i - 1] != b':');
        let rest = &code[i..];
        match bytes[i] {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if inline_opens.last() == Some(&depth) {
                    inline_opens.pop();
                }
            }
            _ => {}
        }
        if at_word && rest.starts_with("mod ") {
            let decl = rest[4..].trim_start();
            let name_len = decl.bytes().take_while(|b| is_ident(*b)).count();
            if decl[name_len..].trim_start().starts_with('{') {
                inline_opens.push(depth);
            }
        }
        if at_word && rest.starts_with("use ") {
            let end = rest.find(';').unwrap_or(rest.len());
            let before = code[..i].trim_end();
            let re_export =
                before.ends_with("pub") || (before.ends_with(')') && before.contains("pub("));
            for path in expand_use_tree(&rest[4..end]) {
                found.push(Named {
                    path,
                    re_export,
                    inline_depth: inline_opens.len(),
                });
            }
            i += end;
            continue;
        }
        if at_word
            && ["crate::", "super::", "self::"]
                .iter()
                .any(|p| rest.starts_with(p))
        {
            let len = rest
                .bytes()
                .take_while(|b| is_ident(*b) || *b == b':')
                .count();
            let path = rest[..len]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            found.push(Named {
                path,
                re_export: false,
                inline_depth: inline_opens.len(),
            });
            i += len;
            continue;
        }
        i += 1;
    }
    found
}

/// One crate's files and the arrows between them, each with the names it carries.
struct FileGraph {
    files: Vec<PathBuf>,
    arrows: BTreeMap<(usize, usize), BTreeSet<String>>,
}

fn file_graph(root: &Path) -> FileGraph {
    let modules = crate_modules(root);
    let by_file: BTreeMap<&PathBuf, &Vec<String>> = modules.iter().map(|(m, f)| (f, m)).collect();
    let named: BTreeMap<&PathBuf, Vec<Named>> = modules
        .values()
        .map(|f| (f, named_paths(&std::fs::read_to_string(f).unwrap())))
        .collect();
    let files: Vec<PathBuf> = modules.values().cloned().collect();
    let index = |f: &PathBuf| files.iter().position(|x| x == f).unwrap();
    let mut arrows: BTreeMap<(usize, usize), BTreeSet<String>> = BTreeMap::new();
    for (file, paths) in &named {
        let module = by_file[file];
        for n in paths.iter().filter(|n| !n.re_export) {
            let Some((target, name)) = resolve(&modules, &named, module, n, 0) else {
                continue;
            };
            if &target != *file {
                arrows
                    .entry((index(file), index(&target)))
                    .or_default()
                    .insert(name);
            }
        }
    }
    FileGraph { files, arrows }
}

/// The file that defines what `n` names from `module`, and the name itself;
/// `None` for another crate, or the file itself. A name a module only
/// forwards (`pub use child::Name`) is followed to the child.
fn resolve(
    modules: &Modules,
    named: &BTreeMap<&PathBuf, Vec<Named>>,
    module: &[String],
    n: &Named,
    hops: usize,
) -> Option<(PathBuf, String)> {
    let segs = &n.path;
    let (base, rest): (Vec<String>, &[String]) = match segs.first()?.as_str() {
        "crate" => (Vec::new(), &segs[1..]),
        "super" => {
            let ups = segs.iter().take_while(|s| *s == "super").count();
            let ups = ups.checked_sub(n.inline_depth).filter(|u| *u > 0)?;
            (
                module[..module.len().checked_sub(ups)?].to_vec(),
                &segs[ups + n.inline_depth..],
            )
        }
        "self" if n.inline_depth == 0 => (module.to_vec(), &segs[1..]),
        first if n.inline_depth == 0 => {
            let mut child = module.to_vec();
            child.push(first.to_string());
            modules.contains_key(&child).then_some(())?;
            (module.to_vec(), &segs[..])
        }
        _ => return None,
    };
    let mut at = base;
    let mut used = 0;
    for seg in rest {
        let mut next = at.clone();
        next.push(seg.clone());
        if !modules.contains_key(&next) {
            break;
        }
        at = next;
        used += 1;
    }
    let file = modules.get(&at)?;
    let Some(item) = rest.get(used) else {
        return Some((file.clone(), at.last().cloned().unwrap_or_default()));
    };
    let forwarded = named
        .get(file)
        .into_iter()
        .flatten()
        .find(|f| f.re_export && f.path.last() == Some(item) && f.inline_depth == 0);
    match forwarded {
        Some(f) if hops < 4 => resolve(modules, named, &at, f, hops + 1),
        _ => Some((file.clone(), item.clone())),
    }
}

/// The strongly connected components of more than one node (Tarjan).
fn circles(nodes: usize, arrows: &BTreeSet<(usize, usize)>) -> Vec<Vec<usize>> {
    struct State<'a> {
        next: Vec<Vec<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        counter: usize,
        out: &'a mut Vec<Vec<usize>>,
    }
    fn visit(s: &mut State, v: usize) {
        s.index[v] = Some(s.counter);
        s.low[v] = s.counter;
        s.counter += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for w in s.next[v].clone() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(i) if s.on_stack[w] => s.low[v] = s.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort_unstable();
                s.out.push(component);
            }
        }
    }
    let mut next = vec![Vec::new(); nodes];
    for &(a, b) in arrows {
        next[a].push(b);
    }
    let mut out = Vec::new();
    let mut state = State {
        next,
        index: vec![None; nodes],
        low: vec![0; nodes],
        stack: Vec::new(),
        on_stack: vec![false; nodes],
        counter: 0,
        out: &mut out,
    };
    for v in 0..nodes {
        if state.index[v].is_none() {
            visit(&mut state, v);
        }
    }
    out.sort();
    out
}

/// Each circle of a crate as its files and the arrows (with names) inside it.
fn describe_circles(root: &Path, shown_from: &Path) -> Vec<String> {
    let graph = file_graph(root);
    let arrows: BTreeSet<(usize, usize)> = graph.arrows.keys().copied().collect();
    let name = |i: usize| {
        let f = &graph.files[i];
        f.strip_prefix(shown_from)
            .unwrap_or(f)
            .display()
            .to_string()
    };
    circles(graph.files.len(), &arrows)
        .into_iter()
        .map(|component| {
            let mut lines = vec![component
                .iter()
                .map(|&i| name(i))
                .collect::<Vec<_>>()
                .join(" ⇄ ")];
            for ((a, b), names) in &graph.arrows {
                if component.contains(a) && component.contains(b) {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    lines.push(format!(
                        "    {} → {}: {}",
                        name(*a),
                        name(*b),
                        names.join(", ")
                    ));
                }
            }
            lines.join("\n")
        })
        .collect()
}

#[test]
fn no_import_circle_between_files() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for root in ["src/lib.rs", "experiments/src/lib.rs", "kernels/src/lib.rs"] {
        let root = repo.join(root);
        assert!(
            crate_modules(&root).len() > 10,
            "{}: no modules found",
            root.display()
        );
        found.extend(describe_circles(&root, repo));
    }
    assert!(
        found.is_empty(),
        "import circles between files (move the shared item down, or split the file):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_circle_finder_finds_only_circles() {
    let arrows: BTreeSet<(usize, usize)> = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 4), (2, 3)]
        .into_iter()
        .collect();
    assert_eq!(circles(7, &arrows), vec![vec![0, 1, 2], vec![4, 5]]);
    assert!(circles(3, &[(0, 1), (1, 2)].into_iter().collect()).is_empty());
}

#[test]
fn use_trees_and_paths_are_read_as_the_compiler_reads_them() {
    let strings = |paths: Vec<Vec<String>>| -> Vec<String> {
        paths.into_iter().map(|p| p.join("::")).collect()
    };
    assert_eq!(
        strings(expand_use_tree(
            "crate::image::{lock::{self, Lockfile as L}, render}"
        )),
        [
            "crate::image::lock",
            "crate::image::lock::Lockfile",
            "crate::image::render"
        ]
    );
    let text = "pub use lock::Lockfile;\nuse super::x::Y; // crate::no\nfn f() { crate::a::b() }\nmod tests {\n use super::*;\n}\n";
    let seen: Vec<(String, bool, usize)> = named_paths(text)
        .into_iter()
        .map(|n| (n.path.join("::"), n.re_export, n.inline_depth))
        .collect();
    assert_eq!(
        seen,
        [
            ("lock::Lockfile".to_string(), true, 0),
            ("super::x::Y".to_string(), false, 0),
            ("crate::a::b".to_string(), false, 0),
            ("super".to_string(), false, 1),
        ]
    );
}
