//! The daemon's build stream as `envgen image build` shows it: a progress
//! bar (or JSON events with `--json`), the current step's output (shown
//! when that step fails), and the intermediate images and containers the
//! classic builder made (removed when the build does not finish).

use std::io::IsTerminal as _;

use super::daemon;
use crate::error::Result;

fn progress(json: bool) -> indicatif::ProgressBar {
    if json || crate::output::quiet() || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar =
        indicatif::ProgressBar::with_draw_target(Some(1), indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} [{pos}/{len}] {wide_msg}")
    {
        bar.set_style(style);
    }
    bar
}

pub(super) fn emit(json: bool, event: serde_json::Value) {
    if json {
        crate::output::outln!("{event}");
    }
}

/// What the daemon's build stream told us, line by line: the current step
/// and its output (shown when it fails), and the IDs of the intermediate
/// images and containers it made (removed when the build does not finish).
pub(super) struct BuildLog {
    json: bool,
    pub(super) bar: indicatif::ProgressBar,
    pub(super) step: String,
    pub(super) step_output: String,
    intermediates: Vec<String>,
    containers: Vec<String>,
    pub(super) failure: Option<String>,
}

/// A short hex ID as the classic builder prints it ("---> 3f2a9c1b0d4e").
fn short_id(text: &str) -> Option<&str> {
    let text = text.trim();
    (text.len() >= 12 && text.chars().all(|c| c.is_ascii_hexdigit())).then_some(text)
}

impl BuildLog {
    pub(super) fn new(json: bool) -> BuildLog {
        BuildLog {
            json,
            bar: progress(json),
            step: String::new(),
            step_output: String::new(),
            intermediates: Vec::new(),
            containers: Vec::new(),
            failure: None,
        }
    }

    fn line(&mut self, line: &str) {
        if let Some(rest) = line.strip_prefix("Step ") {
            // "Step 3/9 : RUN …"
            if let Some((n, total)) = rest.split_once(' ').and_then(|(c, _)| c.split_once('/')) {
                self.bar.set_length(total.parse().unwrap_or(1));
                self.bar.set_position(n.parse().unwrap_or(0));
            }
            self.step = line.to_string();
            self.step_output.clear();
            self.bar.set_message(line.to_string());
            emit(
                self.json,
                serde_json::json!({"event": "step", "step": line}),
            );
        } else if let Some(rest) = line.trim().strip_prefix("---> ") {
            if let Some(id) = rest.strip_prefix("Running in ").and_then(short_id) {
                self.containers.push(id.to_string());
            } else if let Some(id) = short_id(rest) {
                self.intermediates.push(id.to_string());
            }
        }
        if line.trim().is_empty() {
            return;
        }
        self.step_output.push_str(line);
        self.step_output.push('\n');
        if self.json {
            emit(true, serde_json::json!({"event": "output", "line": line}));
        } else {
            self.bar.suspend(|| eprintln!("{line}"));
        }
    }

    pub(super) fn absorb(
        &mut self,
        item: std::result::Result<bollard::models::BuildInfo, bollard::errors::Error>,
    ) {
        match item {
            Ok(info) => {
                if let Some(text) = info.stream {
                    text.lines().for_each(|line| self.line(line));
                }
                if let Some(detail) = info.error_detail {
                    self.failure = detail.message.or(Some("the build failed".into()));
                }
            }
            Err(bollard::errors::Error::DockerStreamError { error }) => self.failure = Some(error),
            Err(other) => self.failure = Some(other.to_string()),
        }
    }

    /// Remove what this build made and did not finish: its step containers
    /// and the images of its steps that are new since `images_before`.
    pub(super) async fn clean_up(
        &self,
        docker: &bollard::Docker,
        images_before: &[String],
    ) -> Result<()> {
        daemon::remove_containers(docker, &self.containers).await;
        let (images_after, _) = daemon::snapshot(docker).await?;
        let new: Vec<String> = images_after
            .into_iter()
            .filter(|id| !images_before.contains(id))
            .filter(|id| {
                let id = id.trim_start_matches("sha256:");
                self.intermediates.iter().any(|short| id.starts_with(short))
            })
            .collect();
        daemon::remove_images(docker, &new).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_log_collects_steps_intermediates_and_containers() {
        let mut log = BuildLog::new(true);
        for line in [
            "Step 2/9 : RUN false",
            " ---> Running in 0123456789ab",
            " ---> fedcba987654",
            "oops",
        ] {
            log.line(line);
        }
        assert_eq!(log.step, "Step 2/9 : RUN false");
        assert_eq!(log.containers, ["0123456789ab"]);
        assert_eq!(log.intermediates, ["fedcba987654"]);
        assert!(log.step_output.ends_with("oops\n"));
    }
}
