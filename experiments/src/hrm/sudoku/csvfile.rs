//! The public Sudoku-Extreme CSV layout: a header, then one puzzle a row as
//! `source,q,a,rating` — `q` the puzzle (81 characters, '.' for blanks), `a`
//! its solution, `rating` an integer (tdoku backtracks in the public files,
//! our solver's guesses in generated ones). The reader takes the public
//! files unchanged.

use std::io::{Read, Write};
use std::path::Path;

use super::grid::{agrees_with, is_solved_grid, parse_cells, parse_grid, to_line, Grid};
use crate::error::UserError;

/// The header we write.
pub const HEADER: [&str; 4] = ["source", "q", "a", "rating"];
/// Header spellings accepted when reading (ours and the long column names).
const ACCEPTED_HEADERS: [[&str; 4]; 2] = [HEADER, ["source", "question", "answer", "rating"]];

/// One row of the CSV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub source: String,
    pub puzzle: Grid,
    pub solution: Grid,
    pub rating: u32,
}

fn csv_error(path: &str, err: ::csv::Error) -> UserError {
    let at = err
        .position()
        .map(|p| format!(" line {}", p.line()))
        .unwrap_or_default();
    UserError::usage(format!("{path}:{at}: not readable as CSV: {err}"))
        .with_fix("the file must be comma-separated `source,q,a,rating` rows with a header")
}

/// Read rows from any reader; `name` is used in error messages.
pub fn read_rows<R: Read>(reader: R, name: &str) -> Result<Vec<Row>, UserError> {
    let mut csv = ::csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(reader);
    let header = csv.headers().map_err(|e| csv_error(name, e))?.clone();
    let fields: Vec<&str> = header.iter().map(str::trim).collect();
    if !ACCEPTED_HEADERS.iter().any(|h| fields == h[..]) {
        return Err(UserError::usage(format!(
            "{name}: line 1: header is `{}`, expected `{}`",
            fields.join(","),
            HEADER.join(",")
        ))
        .with_fix(
            "use the Sudoku-Extreme layout: a header `source,q,a,rating`, then one puzzle a row",
        ));
    }
    let mut rows = Vec::new();
    for record in csv.records() {
        let record = record.map_err(|e| csv_error(name, e))?;
        let line = record.position().map(|p| p.line()).unwrap_or(0);
        let bad = |column: &str, problem: String| {
            UserError::usage(format!("{name}: line {line}, column {column}: {problem}"))
                .with_fix("puzzles and solutions are 81 characters, digits 1-9 and '.' (or '0') for blanks; rating is a non-negative integer")
        };
        let puzzle = parse_grid(&record[1]).map_err(|e| bad("q", format!("puzzle {e}")))?;
        let solution = parse_cells(&record[2]).map_err(|e| bad("a", format!("solution {e}")))?;
        if !is_solved_grid(&solution) {
            return Err(bad("a", "solution is not a complete valid grid".into()));
        }
        if !agrees_with(&puzzle, &solution) {
            return Err(bad(
                "a",
                "solution contradicts a given of the puzzle".into(),
            ));
        }
        let rating = record[3].trim().parse::<u32>().map_err(|_| {
            bad(
                "rating",
                format!("{:?} is not a non-negative integer", &record[3]),
            )
        })?;
        rows.push(Row {
            source: record[0].to_string(),
            puzzle,
            solution,
            rating,
        });
    }
    Ok(rows)
}

/// Read a CSV file.
pub fn read_file(path: &Path) -> Result<Vec<Row>, UserError> {
    let file = std::fs::File::open(path).map_err(|e| {
        UserError::usage(format!("cannot open {}: {e}", path.display()))
            .with_fix("pass an existing CSV file in the Sudoku-Extreme layout")
    })?;
    read_rows(std::io::BufReader::new(file), &path.display().to_string())
}

/// Puzzles to solve from a file, each with its line number: either a CSV
/// with a header naming a `q` (or `question`) column, or one 81-character
/// puzzle a line. Cells are not checked here (the caller reports them).
pub fn read_puzzle_lines(path: &Path) -> Result<Vec<(u64, String)>, UserError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UserError::usage(format!("cannot read {}: {e}", path.display()))
            .with_fix("pass an existing file: a Sudoku-Extreme CSV or one puzzle a line")
    })?;
    let first = text.lines().next().unwrap_or("");
    if !first.contains(',') {
        return Ok(text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (i as u64 + 1, l.trim().to_string()))
            .collect());
    }
    let name = path.display().to_string();
    let mut csv = ::csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(text.as_bytes());
    let header = csv.headers().map_err(|e| csv_error(&name, e))?.clone();
    let column = header
        .iter()
        .position(|h| matches!(h.trim(), "q" | "question"))
        .ok_or_else(|| {
            UserError::usage(format!("{name}: line 1: the header has no `q` column"))
                .with_fix("use the Sudoku-Extreme layout `source,q,a,rating`, or one puzzle a line")
        })?;
    let mut out = Vec::new();
    for record in csv.records() {
        let record = record.map_err(|e| csv_error(&name, e))?;
        let line = record.position().map(|p| p.line()).unwrap_or(0);
        let cell = record.get(column).ok_or_else(|| {
            UserError::usage(format!("{name}: line {line}: no `q` field"))
                .with_fix("every row needs as many fields as the header")
        })?;
        out.push((line, cell.to_string()));
    }
    Ok(out)
}

/// Write rows (header first).
pub fn write_rows<W: Write>(writer: W, rows: &[Row]) -> std::io::Result<()> {
    let mut csv = ::csv::Writer::from_writer(writer);
    csv.write_record(HEADER)?;
    for row in rows {
        csv.write_record([
            row.source.as_str(),
            &to_line(&row.puzzle),
            &to_line(&row.solution),
            &row.rating.to_string(),
        ])?;
    }
    csv.flush()
}

/// Write a CSV file, creating its parent directory.
pub fn write_file(path: &Path, rows: &[Row]) -> Result<(), UserError> {
    let fail = |e: std::io::Error| {
        UserError::environment(format!("cannot write {}: {e}", path.display()))
            .with_fix("choose a writable output path")
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(fail)?;
    }
    let file = std::fs::File::create(path).map_err(fail)?;
    write_rows(std::io::BufWriter::new(file), rows).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::super::generate::{generate, Difficulty};
    use super::*;

    fn rows() -> Vec<Row> {
        generate(Difficulty::Easy, 3, 5, 1)
            .into_iter()
            .map(|g| Row {
                source: "envgen-easy".into(),
                puzzle: g.puzzle,
                solution: g.solution,
                rating: g.rating,
            })
            .collect()
    }

    #[test]
    fn write_then_read_round_trips() {
        let rows = rows();
        let mut bytes = Vec::new();
        write_rows(&mut bytes, &rows).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with("source,q,a,rating\n"));
        assert!(text.lines().nth(1).unwrap().contains('.'));
        assert_eq!(read_rows(&bytes[..], "mem.csv").unwrap(), rows);
        // The long header spelling is accepted too.
        let long = text.replacen("source,q,a,rating", "source,question,answer,rating", 1);
        assert_eq!(read_rows(long.as_bytes(), "mem.csv").unwrap(), rows);
    }

    #[test]
    fn errors_name_line_and_column() {
        let rows = rows();
        let mut bytes = Vec::new();
        write_rows(&mut bytes, &rows).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        let bad_header = text.replacen("rating", "score", 1);
        let err = read_rows(bad_header.as_bytes(), "x.csv").unwrap_err();
        assert!(
            err.message.contains("x.csv: line 1: header"),
            "{}",
            err.message
        );

        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        lines[2] = lines[2].replacen(',', ",x", 1); // corrupt row 2's puzzle
        let err = read_rows(lines.join("\n").as_bytes(), "x.csv").unwrap_err();
        assert!(err.message.contains("line 3, column q"), "{}", err.message);

        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        lines[1] = format!("{},abc", lines[1].rsplit_once(',').unwrap().0);
        let err = read_rows(lines.join("\n").as_bytes(), "x.csv").unwrap_err();
        assert!(
            err.message.contains("line 2, column rating"),
            "{}",
            err.message
        );

        let wrong_solution = text.replacen(&to_line(&rows[0].solution), &"1".repeat(81), 1);
        let err = read_rows(wrong_solution.as_bytes(), "x.csv").unwrap_err();
        assert!(err.message.contains("line 2, column a"), "{}", err.message);
    }
}
