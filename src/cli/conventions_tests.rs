//! The CLI's conventions, checked on the clap definitions themselves (no
//! process started): every flag and argument of every subcommand says
//! what it is, and `run --help` groups its flags under headings.

use clap::CommandFactory;

use super::Cli;

/// Every argument of `command` and of its subcommands, as
/// "envgen run --preset", without help text.
fn undocumented(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
    for arg in command.get_arguments() {
        // clap's own --help/--version carry clap's text.
        if arg.is_hide_set() || matches!(arg.get_id().as_str(), "help" | "version") {
            continue;
        }
        if arg.get_help().is_none() && arg.get_long_help().is_none() {
            let name = arg
                .get_long()
                .map(|long| format!("--{long}"))
                .unwrap_or_else(|| arg.get_id().to_string());
            missing.push(format!("{path} {name}"));
        }
    }
    for sub in command.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        if sub.get_about().is_none() {
            missing.push(format!("{path} {} (the subcommand)", sub.get_name()));
        }
        undocumented(sub, &format!("{path} {}", sub.get_name()), missing);
    }
}

#[test]
fn every_argument_of_every_subcommand_has_help_text() {
    let mut command = Cli::command();
    command.build();
    let mut missing = Vec::new();
    undocumented(&command, "envgen", &mut missing);
    assert!(
        missing.is_empty(),
        "arguments without a doc comment (they show as bare flags in --help and the man page):\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn run_help_groups_its_flags_under_headings() {
    let mut command = Cli::command();
    command.build();
    let run = command.find_subcommand_mut("run").expect("run");
    let help = run.render_help().to_string();
    let mut at = 0;
    for heading in [
        "Science:",
        "Hardware:",
        "Where:",
        "Slurm:",
        "Docker:",
        "Output:",
    ] {
        let found = help[at..]
            .find(&format!("\n{heading}\n"))
            .unwrap_or_else(|| panic!("no {heading} heading (in this order) in:\n{help}"));
        at += found + 1;
    }
    // A flag sits under its heading: --partition after Slurm:, before Docker:.
    let slurm = help.find("\nSlurm:\n").unwrap();
    let docker = help.find("\nDocker:\n").unwrap();
    let partition = help.find("--partition").unwrap();
    assert!(slurm < partition && partition < docker, "{help}");
    // A new run flag lands under a heading too, not back in a flat list.
    let unheaded: Vec<&str> = run
        .get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set() && !a.is_global_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .filter(|a| a.get_help_heading().is_none())
        .map(|a| a.get_id().as_str())
        .collect();
    assert!(
        unheaded.is_empty(),
        "run flags without a heading: {unheaded:?}"
    );
}
