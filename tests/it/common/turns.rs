//! Turns for the heavy areas.
//!
//! Each area was its own test binary, and cargo runs test binaries one
//! after another: an area's tests ran beside each other, never beside
//! another area's. The areas that train models, build images or drive the
//! Docker daemon or the Slurm cluster rely on that: their timeouts and
//! speed ratios were measured beside their own tests only; images,
//! run_docker, run_slurm and fresh_clone all build or use the
//! `envgen/cpu:VERSION` image and check exactly what a build left behind;
//! slurm and run_slurm share one node. So each of their tests is written
//! `heavy_test!(name, |tmp| { … })` (or takes `let _turn = turn!();`
//! itself): it waits while another area has the turn, and runs beside
//! tests of its own area as before. The quick areas (doctor_*,
//! verdicts, sudoku_cli) take no turn and run beside anything.

use std::io::Write;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Instant;

/// Whose turn it is: the area (module path) whose tests are running, how
/// many of them, and since when.
pub struct Turns {
    holder: Mutex<Option<(&'static str, usize, Instant)>>,
    freed: Condvar,
}

/// A test's share of its area's turn; the turn passes on when the last
/// running test of the area drops its share (also when it panics).
#[must_use = "the turn ends when this is dropped"]
pub struct Turn<'a>(&'a Turns);

impl Turns {
    pub const fn new() -> Self {
        Turns {
            holder: Mutex::new(None),
            freed: Condvar::new(),
        }
    }

    /// Wait until no other area has the turn, then share it with `area`'s
    /// other running tests.
    pub fn take(&self, area: &'static str) -> Turn<'_> {
        let mut holder = self.holder.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match &mut *holder {
                None => {
                    *holder = Some((area, 1, Instant::now()));
                    break;
                }
                Some((held, tests, _)) if *held == area => {
                    *tests += 1;
                    break;
                }
                Some(_) => {
                    holder = self
                        .freed
                        .wait(holder)
                        .unwrap_or_else(PoisonError::into_inner)
                }
            }
        }
        Turn(self)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut holder = self.0.holder.lock().unwrap_or_else(PoisonError::into_inner);
        let (area, tests, since) = holder.as_mut().expect("a turn is held");
        *tests -= 1;
        if *tests == 0 {
            record_turn(area, since.elapsed().as_secs_f64());
            *holder = None;
            self.0.freed.notify_all();
        }
    }
}

/// Appends `AREA<TAB>SECONDS` for a turn that just ended to the file
/// `ENVGEN_TEST_AREA_TIMES` names (scripts/test.sh sets it and prints the
/// sums): where the suite's time goes, area by area, in every CI log. An
/// area that takes its turn more than once has several lines.
fn record_turn(area: &str, seconds: f64) {
    let Some(path) = std::env::var_os("ENVGEN_TEST_AREA_TIMES") else {
        return;
    };
    // Only the suite's areas (module paths), not this file's own test's.
    let Some(area) = area.strip_prefix("it::") else {
        return;
    };
    // One write of a whole line per turn: concurrent appends stay lines.
    let line = format!("{area}\t{seconds:.1}\n");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(line.as_bytes());
    }
}

/// The turns of this test process.
pub static TURNS: Turns = Turns::new();

/// `turn!()`: the calling module's turn, held for the rest of the test.
macro_rules! turn {
    () => {
        $crate::common::turns::TURNS.take(module_path!())
    };
}
pub(crate) use turn;

/// A test of an area that takes turns, with the preamble each one used to
/// repeat by hand (ripgrep's `rgtest!` habit): `heavy_test!(name, || { … })`
/// holds the area's turn for the whole test; `heavy_test!(name, |tmp| { … })`
/// also gives it a fresh temporary directory `tmp` (a `tempfile::TempDir`,
/// removed when the test ends, also when it fails). The body is a block, not
/// a closure: `return` ends the test.
macro_rules! heavy_test {
    ($name:ident, || $body:block) => {
        #[test]
        fn $name() {
            let _turn = $crate::common::turn!();
            $body
        }
    };
    ($name:ident, |$tmp:ident| $body:block) => {
        #[test]
        fn $name() {
            let _turn = $crate::common::turn!();
            let $tmp = tempfile::tempdir().unwrap();
            $body
        }
    };
}
pub(crate) use heavy_test;

#[test]
fn an_area_shares_its_turn_and_another_area_waits_for_it() {
    use std::time::Duration;
    let turns = &Turns::new();
    let a1 = turns.take("a");
    // The same area again: shared at once (this thread would hang otherwise).
    let a2 = turns.take("a");
    std::thread::scope(|s| {
        let (taken, got) = std::sync::mpsc::channel();
        s.spawn(move || {
            let _b = turns.take("b");
            taken.send(()).unwrap();
        });
        assert!(
            got.recv_timeout(Duration::from_millis(200)).is_err(),
            "b ran beside a"
        );
        drop(a1);
        assert!(
            got.recv_timeout(Duration::from_millis(200)).is_err(),
            "b ran beside a's other test"
        );
        drop(a2);
        got.recv_timeout(Duration::from_secs(10))
            .expect("b got the turn once a's tests were done");
    });
}
