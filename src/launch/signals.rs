//! Stopping a run: SIGINT/SIGTERM set a flag that the training loop looks
//! at after each step (checkpoint, then stop) and that a launcher turns into
//! the place's own stop (SIGTERM to the ranks, `docker stop`, `scancel`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Exit code of a run stopped by SIGINT/SIGTERM (128 + SIGINT), after its checkpoint.
pub const EXIT_INTERRUPTED: i32 = 130;

/// Install the handler: SIGINT/SIGTERM set the returned flag and print `message`.
pub fn install_stop_handler(message: &'static str) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            else {
                return;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            eprintln!("envgen: {message}");
            flag.store(true, Ordering::SeqCst);
        });
    });
    stop
}
