//! Turns for the heavy areas.
//!
//! Each area was its own test binary, and cargo runs test binaries one
//! after another: an area's tests ran beside each other, never beside
//! another area's. The areas that train models, build images or drive the
//! Docker daemon or the Slurm cluster rely on that: their timeouts and
//! speed ratios were measured beside their own tests only; images,
//! run_docker, run_slurm and fresh_clone all build or use the
//! `envgen/cpu:VERSION` image and check exactly what a build left behind;
//! slurm and run_slurm share one node. So each of their tests starts with
//! `let _turn = turn!();`: it waits while another area has the turn, and
//! runs beside tests of its own area as before. The quick areas (doctor_*,
//! verdicts, sudoku_cli) take no turn and run beside anything.

use std::sync::{Condvar, Mutex, PoisonError};

/// Whose turn it is: the area (module path) whose tests are running, and
/// how many of them.
pub struct Turns {
    holder: Mutex<Option<(&'static str, usize)>>,
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
                    *holder = Some((area, 1));
                    break;
                }
                Some((held, tests)) if *held == area => {
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
        let (_, tests) = holder.as_mut().expect("a turn is held");
        *tests -= 1;
        if *tests == 0 {
            *holder = None;
            self.0.freed.notify_all();
        }
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
