//! Following one growing `metrics.jsonl`: only the bytes written since the
//! last look are read. A file that was replaced or became shorter (a run
//! that restarted or resumed rewrites it: `MetricsLog` keeps the lines up
//! to its checkpoint and replaces the file) is read again from its start,
//! and the caller is told so that it forgets what it saw.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Where reading one file stands.
#[derive(Debug)]
pub struct Tail {
    path: PathBuf,
    /// Bytes of the file already taken (complete lines and `partial`).
    offset: u64,
    /// (device, inode) of the file read so far: a new one means replaced.
    identity: Option<(u64, u64)>,
    /// The start of a line whose end has not been written yet.
    partial: Vec<u8>,
}

/// What one look at the file found.
#[derive(Debug, Default, PartialEq)]
pub struct Lines {
    /// The file was replaced or truncated: `rows` start from its beginning.
    pub restarted: bool,
    /// Each complete new line that is a JSON object, in order. Other lines
    /// (not JSON: a hand edit, a torn write) are skipped: watching must
    /// not stop over a line `runs show` would name.
    pub rows: Vec<Value>,
}

impl Tail {
    pub fn new(path: &Path) -> Tail {
        Tail {
            path: path.to_path_buf(),
            offset: 0,
            identity: None,
            partial: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The complete lines written since the last call. A missing file
    /// (not started yet) gives nothing; an unreadable one is an error.
    pub fn read_new(&mut self) -> std::io::Result<Lines> {
        let mut found = Lines::default();
        let mut file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        let identity = Some((meta.dev(), meta.ino()));
        if (self.identity.is_some() && identity != self.identity) || meta.len() < self.offset {
            found.restarted = true;
            self.offset = 0;
            self.partial.clear();
        }
        self.identity = identity;
        if meta.len() == self.offset {
            return Ok(found);
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.take(meta.len() - self.offset)
            .read_to_end(&mut bytes)?;
        self.offset += bytes.len() as u64;
        self.partial.extend_from_slice(&bytes);
        // Only complete lines: the rest waits for its newline.
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return Ok(found);
        };
        let rest = self.partial.split_off(end + 1);
        let complete = std::mem::replace(&mut self.partial, rest);
        for line in complete.split(|&b| b == b'\n') {
            if let Ok(row @ Value::Object(_)) = serde_json::from_slice::<Value>(line) {
                found.rows.push(row);
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn steps(lines: &Lines) -> Vec<u64> {
        lines
            .rows
            .iter()
            .filter_map(|r| r["step"].as_u64())
            .collect()
    }

    #[test]
    fn reads_only_new_complete_lines_and_waits_for_a_line_s_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.jsonl");
        let mut tail = Tail::new(&path);
        assert_eq!(tail.read_new().unwrap(), Lines::default(), "no file yet");
        append(&path, "{\"step\": 1}\n{\"step\": 2}\n{\"st");
        assert_eq!(steps(&tail.read_new().unwrap()), [1, 2]);
        assert_eq!(steps(&tail.read_new().unwrap()), Vec::<u64>::new());
        append(&path, "ep\": 3}\nnot json\n\n{\"step\": 4}\n");
        let lines = tail.read_new().unwrap();
        assert_eq!(steps(&lines), [3, 4]);
        assert!(!lines.restarted);
    }

    #[test]
    fn a_replaced_or_shortened_file_is_read_again_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.jsonl");
        let mut tail = Tail::new(&path);
        append(&path, "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3}\n");
        assert_eq!(steps(&tail.read_new().unwrap()), [1, 2, 3]);
        // What a resume does: keep the lines through the checkpoint, in a
        // new file renamed over the old one.
        let new = dir.path().join("new");
        std::fs::write(
            &new,
            "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3}\n{\"step\": 9}\n",
        )
        .unwrap();
        std::fs::rename(&new, &path).unwrap();
        let lines = tail.read_new().unwrap();
        assert!(lines.restarted);
        assert_eq!(steps(&lines), [1, 2, 3, 9]);
        // Truncated in place.
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        append(&path, "{\"step\": 5}\n");
        let lines = tail.read_new().unwrap();
        assert!(lines.restarted);
        assert_eq!(steps(&lines), [5]);
    }
}
