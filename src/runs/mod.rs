//! Run directories (layout in docs/cli.md): the typed manifest and the one
//! place it is written (`manifest`), the lock of the one process that
//! trains it (`lock`), the folder runs are made in (`out_dir`), what a user
//! command ran with (`command_record`), where a run trains and the flags it was launched with (`place`, `launch_flags`), secrets kept out of
//! every record (`redact`), and reading runs to answer questions
//! across them: show, compare, report, watch, export to TensorBoard, pack
//! a run's small files for git (`pack`).

pub mod command_record;
pub mod compare;
pub mod gpu_sampler;
pub mod launch_flags;
pub mod lock;
pub mod manifest;
pub mod out_dir;
pub mod pack;
pub mod place;
pub mod redact;
pub mod report;
pub mod store;
pub mod tensorboard;
pub mod tensorboard_import;
pub mod tensorboard_read;
pub mod watch;
