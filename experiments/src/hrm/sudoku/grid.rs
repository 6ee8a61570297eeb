//! The 9×9 grid: cells in row-major order, 0 for a blank, 1..=9 for a digit.

use std::fmt;

/// Number of cells in a grid.
pub const CELLS: usize = 81;

/// A puzzle or a solution: 81 cells row-major, 0 = blank, 1..=9 = digit.
pub type Grid = [u8; CELLS];

/// The 27 units (9 rows, 9 columns, 9 boxes), each as its 9 cell indices.
pub static UNITS: [[u8; 9]; 27] = build_units();

/// For each cell, the 20 other cells that share its row, column or box.
pub static PEERS: [[u8; 20]; CELLS] = build_peers();

const fn box_of(cell: usize) -> usize {
    (cell / 27) * 3 + (cell % 9) / 3
}

const fn build_units() -> [[u8; 9]; 27] {
    let mut units = [[0u8; 9]; 27];
    let mut i = 0;
    while i < 9 {
        let mut j = 0;
        while j < 9 {
            units[i][j] = (i * 9 + j) as u8; // row i
            units[9 + i][j] = (j * 9 + i) as u8; // column i
            let (band, stack) = (i / 3, i % 3);
            units[18 + i][j] = ((band * 3 + j / 3) * 9 + stack * 3 + j % 3) as u8; // box i
            j += 1;
        }
        i += 1;
    }
    units
}

const fn build_peers() -> [[u8; 20]; CELLS] {
    let mut peers = [[0u8; 20]; CELLS];
    let mut cell = 0;
    while cell < CELLS {
        let mut n = 0;
        let mut other = 0;
        while other < CELLS {
            let same_row = other / 9 == cell / 9;
            let same_col = other % 9 == cell % 9;
            if other != cell && (same_row || same_col || box_of(other) == box_of(cell)) {
                peers[cell][n] = other as u8;
                n += 1;
            }
            other += 1;
        }
        cell += 1;
    }
    peers
}

/// Why an 81-character string is not a Sudoku grid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GridError {
    #[error("has {0} characters, expected 81")]
    WrongLength(usize),
    #[error("character {ch:?} at position {position} (row {row}, column {col}) is not a digit 1-9, '.' or '0'", row = position / 9 + 1, col = position % 9 + 1)]
    BadChar { position: usize, ch: char },
    #[error("digit {digit} is given twice: at row {}, column {} and at row {}, column {}", first / 9 + 1, first % 9 + 1, second / 9 + 1, second % 9 + 1)]
    Conflict {
        digit: u8,
        first: usize,
        second: usize,
    },
}

/// Parse 81 characters ('.' or '0' for a blank), rejecting givens that
/// contradict each other (the same digit twice in a row, column or box).
pub fn parse_grid(text: &str) -> Result<Grid, GridError> {
    let grid = parse_cells(text)?;
    check_givens(&grid)?;
    Ok(grid)
}

/// Parse 81 characters without checking the Sudoku rules.
pub fn parse_cells(text: &str) -> Result<Grid, GridError> {
    let count = text.chars().count();
    if count != CELLS {
        return Err(GridError::WrongLength(count));
    }
    let mut grid = [0u8; CELLS];
    for (position, ch) in text.chars().enumerate() {
        grid[position] = match ch {
            '.' | '0' => 0,
            '1'..='9' => ch as u8 - b'0',
            _ => return Err(GridError::BadChar { position, ch }),
        };
    }
    Ok(grid)
}

/// The first pair of givens that break the Sudoku rule, if any.
pub fn check_givens(grid: &Grid) -> Result<(), GridError> {
    for unit in &UNITS {
        let mut seen = [usize::MAX; 10];
        for &cell in unit {
            let (cell, digit) = (cell as usize, grid[cell as usize]);
            if digit == 0 {
                continue;
            }
            if seen[digit as usize] != usize::MAX {
                let first = seen[digit as usize].min(cell);
                let second = seen[digit as usize].max(cell);
                return Err(GridError::Conflict {
                    digit,
                    first,
                    second,
                });
            }
            seen[digit as usize] = cell;
        }
    }
    Ok(())
}

/// Whether `grid` is a complete, rule-abiding solution.
pub fn is_solved_grid(grid: &Grid) -> bool {
    grid.iter().all(|&d| (1..=9).contains(&d)) && check_givens(grid).is_ok()
}

/// Whether every given of `puzzle` agrees with `solution`.
pub fn agrees_with(puzzle: &Grid, solution: &Grid) -> bool {
    puzzle.iter().zip(solution).all(|(&p, &s)| p == 0 || p == s)
}

/// Number of givens (non-blank cells).
pub fn clue_count(grid: &Grid) -> usize {
    grid.iter().filter(|&&d| d != 0).count()
}

/// Display wrapper writing a grid as 81 characters with `blank` for blanks.
pub struct Line<'a> {
    pub grid: &'a Grid,
    pub blank: char,
}

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &d in self.grid {
            let ch = if d == 0 {
                self.blank
            } else {
                (b'0' + d) as char
            };
            fmt::Write::write_char(f, ch)?;
        }
        Ok(())
    }
}

/// The grid as 81 characters, '.' for blanks (the Sudoku-Extreme layout).
pub fn to_line(grid: &Grid) -> String {
    Line { grid, blank: '.' }.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_peers_cover_the_board() {
        for unit in &UNITS {
            let mut seen = [false; CELLS];
            for &c in unit {
                assert!(!seen[c as usize]);
                seen[c as usize] = true;
            }
        }
        // Cell 0's box holds cells 0,1,2,9,10,11,18,19,20.
        assert_eq!(UNITS[18], [0, 1, 2, 9, 10, 11, 18, 19, 20]);
        for (cell, peers) in PEERS.iter().enumerate() {
            assert!(!peers.contains(&(cell as u8)));
            let mut sorted = peers.to_vec();
            sorted.dedup();
            assert_eq!(sorted.len(), 20);
        }
    }

    #[test]
    fn parse_reports_each_problem() {
        assert_eq!(parse_grid("123"), Err(GridError::WrongLength(3)));
        let mut bad = ".".repeat(81);
        bad.replace_range(10..11, "x");
        assert_eq!(
            parse_grid(&bad),
            Err(GridError::BadChar {
                position: 10,
                ch: 'x'
            })
        );
        let mut twice = "0".repeat(81);
        twice.replace_range(0..1, "5");
        twice.replace_range(8..9, "5");
        let err = parse_grid(&twice).unwrap_err();
        assert_eq!(
            err.to_string(),
            "digit 5 is given twice: at row 1, column 1 and at row 1, column 9"
        );
        let grid = parse_cells(&twice).unwrap();
        assert_eq!(to_line(&grid).len(), 81);
        assert_eq!(clue_count(&grid), 2);
    }
}
