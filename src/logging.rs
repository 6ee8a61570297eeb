//! Logging goes to stderr so `--json` output on stdout stays one document,
//! coloured only when stderr is a terminal that wants colour (issue #39).
//!
//! A second layer counts CubeCL's kernel-loading records (cache hits and
//! kernels compiled, see `envgen_experiments::kernel_cache`) whatever the
//! verbosity: CubeCL writes them at trace level through the `log` crate, and
//! tracing-subscriber forwards `log` records as events.

use envgen_experiments::kernel_cache;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

pub fn init(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_env("ENVGEN_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let printed = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(stderr_wants_colour())
        .without_time()
        .with_filter(filter);
    let counted = KernelLoads
        .with_filter(Targets::new().with_target(kernel_cache::CUBECL_LOAD_TARGET, Level::TRACE));
    let _ = tracing_subscriber::registry()
        .with(printed)
        .with(counted)
        .try_init();
}

/// Colour only where the error labels get it (`error::eprint_error`):
/// anstream says no for a pipe or a file (slurm.out, nohup.out),
/// `NO_COLOR` and `TERM=dumb`, and yes for `CLICOLOR_FORCE`.
/// tracing-subscriber would write ANSI codes whatever stderr is.
fn stderr_wants_colour() -> bool {
    anstream::AutoStream::choice(&std::io::stderr()) != anstream::ColorChoice::Never
}

/// Hands the message of each kernel-loading record to `kernel_cache::record`.
struct KernelLoads;

impl<S: Subscriber> Layer<S> for KernelLoads {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        // Records from `log` carry their real target in the normalized metadata.
        let target = event
            .normalized_metadata()
            .map(|m| m.target().to_string())
            .unwrap_or_else(|| event.metadata().target().to_string());
        if target != kernel_cache::CUBECL_LOAD_TARGET {
            return;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        kernel_cache::record(&message.0);
    }
}

struct Message(String);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}
