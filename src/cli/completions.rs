//! `envgen completions SHELL` and `envgen man [SUBCOMMAND…]`: the shell
//! completion script (clap_complete) and the roff man pages (clap_mangen),
//! both generated from the same clap definitions as `--help`, so they
//! never drift from the flags. docs/cli.md says where to install them.

use std::path::PathBuf;

use clap::CommandFactory;

use crate::error::{ErrorKind, Result, UserError};
use crate::output::out;

/// The fix for a man page folder that cannot be written.
const UNWRITABLE: (ErrorKind, &str) = (
    ErrorKind::Environment,
    "give a folder you can write, e.g. --dir ~/.local/share/man/man1",
);

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// The subcommand whose page to print, e.g. `run` or `runs list`
    /// (default: the page of envgen itself).
    #[arg(value_name = "SUBCOMMAND")]
    pub path: Vec<String>,
    /// Write every page (envgen.1, envgen-run.1, envgen-runs-list.1, …)
    /// into DIR instead of printing one, e.g. ~/.local/share/man/man1.
    #[arg(long, value_name = "DIR", conflicts_with = "path")]
    pub dir: Option<PathBuf>,
}

/// Print the completion script for `args.shell` on stdout.
pub fn completions(args: CompletionsArgs) -> Result<i32> {
    let mut command = super::Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "envgen", &mut script);
    out!("{}", String::from_utf8_lossy(&script));
    Ok(0)
}

/// Print one man page, or write them all with `--dir`.
pub fn man(args: ManArgs) -> Result<i32> {
    let mut root = super::command_with_versions(super::version::short());
    // Subcommands' pages are named envgen-run, envgen-runs-list…, as git's
    // are; `build` also propagates global flags (-v, -q) into every page.
    root.build();
    if let Some(dir) = args.dir {
        std::fs::create_dir_all(&dir).map_err(|e| {
            UserError::from_io(format!("cannot create {}", dir.display()), &e, UNWRITABLE)
        })?;
        clap_mangen::generate_to(root, &dir).map_err(|e| {
            UserError::from_io(
                format!("cannot write the man pages into {}", dir.display()),
                &e,
                UNWRITABLE,
            )
        })?;
        crate::output::notice!(
            "envgen: man pages written to {} (read one with `man envgen-run` once that folder is on MANPATH)",
            dir.display()
        );
        return Ok(0);
    }
    let page = find_page(&root, &args.path)?;
    let mut roff = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut roff)
        .map_err(|e| UserError::from_io("cannot render the man page", &e, UNWRITABLE))?;
    out!("{}", String::from_utf8_lossy(&roff));
    Ok(0)
}

/// The command `path` names below `root` (`["runs", "list"]`), renamed
/// `envgen-runs-list` as its page is; a name that is not a subcommand is
/// refused with the ones there are.
fn find_page(root: &clap::Command, path: &[String]) -> Result<clap::Command> {
    let mut command = root.clone();
    let mut name = root.get_name().to_string();
    for word in path {
        let Some(sub) = command.find_subcommand(word).cloned() else {
            let known: Vec<&str> = command
                .get_subcommands()
                .filter(|c| !c.is_hide_set() && c.get_name() != "help")
                .map(|c| c.get_name())
                .collect();
            return Err(UserError::usage(format!(
                "envgen man: `{}` has no subcommand {word:?}",
                name.replace('-', " ")
            ))
            .with_fix(if known.is_empty() {
                format!(
                    "`envgen man {}` is the last page of this path",
                    path_before(path, word)
                )
            } else {
                format!("name one of: {}", known.join(", "))
            })
            .into());
        };
        name = format!("{name}-{}", sub.get_name());
        command = sub;
    }
    // clap keeps names as &'static str; one page is rendered per process.
    Ok(command.name(&*Box::leak(name.into_boxed_str())))
}

/// The words of `path` before `word`, for the fix of a too-long path.
fn path_before<'a>(path: &'a [String], word: &str) -> String {
    path.iter()
        .take_while(|w| w.as_str() != word)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" ")
}
