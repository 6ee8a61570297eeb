//! The shape of the crate stays as docs/architecture.md draws it: layers
//! point one way (cli → launch → runs → image/probe → compat/profiles →
//! host/error). This reads every `crate::…` path in src/ (code and unit
//! tests, not comments) and fails naming the file, line and arrow that
//! points upward or sideways.

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
    ("cli", 5),
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
