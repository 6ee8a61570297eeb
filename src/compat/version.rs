//! Dotted numeric versions ("535.261.03", "12.8", "8.9").
//!
//! Written by hand because driver versions are not semver (leading zeros such
//! as "03", two or three parts) and compute capabilities are "major.minor";
//! comparing component-wise with missing parts as zero is all we need.

use std::cmp::Ordering;
use std::fmt;

/// A version of up to a few numeric components; missing parts compare as 0.
/// The text it was parsed from is kept for display: driver versions keep
/// their leading zeros ("580.65.06", not "580.65.6").
#[derive(Debug, Clone)]
pub struct Version(Vec<u32>, Option<String>);

impl Version {
    /// Parse "535.261.03", "12.8", "13": digits separated by dots, nothing else.
    pub fn parse(text: &str) -> Option<Version> {
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        let parts: Option<Vec<u32>> = text
            .split('.')
            .map(|part| {
                if part.is_empty() || part.len() > 9 || !part.bytes().all(|b| b.is_ascii_digit()) {
                    None
                } else {
                    part.parse().ok()
                }
            })
            .collect();
        parts
            .filter(|p| p.len() <= 4)
            .map(|p| Version(p, Some(text.to_owned())))
    }

    pub fn major(&self) -> u32 {
        self.0.first().copied().unwrap_or(0)
    }

    pub fn minor(&self) -> u32 {
        self.0.get(1).copied().unwrap_or(0)
    }

    /// The "major.minor" prefix (what cuDriverGetVersion reports for CUDA).
    pub fn major_minor(&self) -> Version {
        Version(vec![self.major(), self.minor()], None)
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        let len = self.0.len().max(other.0.len());
        (0..len)
            .map(|i| {
                let a = self.0.get(i).copied().unwrap_or(0);
                let b = other.0.get(i).copied().unwrap_or(0);
                a.cmp(&b)
            })
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
    }
}

// Equality follows the ordering: "12.8" == "12.8.0".
impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Version {}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(text) = &self.1 {
            return write!(f, "{text}");
        }
        let parts: Vec<String> = self.0.iter().map(u32::to_string).collect();
        write!(f, "{}", parts.join("."))
    }
}

/// A compute capability written any of the ways people and tools do:
/// "8.6", "86", "sm_86", "sm86", "compute_120", "sm_90a" (suffix returned).
pub fn parse_compute_capability(text: &str) -> Option<(Version, Option<char>)> {
    let lower = text.trim().to_ascii_lowercase();
    let body = lower
        .strip_prefix("sm_")
        .or_else(|| lower.strip_prefix("compute_"))
        .or_else(|| lower.strip_prefix("sm"))
        .unwrap_or(&lower);
    let (body, suffix) = match body.chars().last() {
        Some(c @ ('a' | 'f')) => (&body[..body.len() - 1], Some(c)),
        _ => (body, None),
    };
    if body.contains('.') {
        let v = Version::parse(body)?;
        return (v.0.len() == 2).then_some((v, suffix));
    }
    if body.len() < 2 || body.len() > 3 || !body.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (major, minor) = body.split_at(body.len() - 1);
    Some((
        Version(vec![major.parse().ok()?, minor.parse().ok()?], None),
        suffix,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_keeps_leading_zeros_of_driver_versions() {
        assert_eq!(
            Version::parse("580.65.06").unwrap().to_string(),
            "580.65.06"
        );
        assert_eq!(
            Version::parse("12.8.1").unwrap().major_minor().to_string(),
            "12.8"
        );
    }

    #[test]
    fn driver_versions_compare_numerically() {
        let v = |s| Version::parse(s).unwrap();
        assert!(v("535.261.03") > v("535.104.05"));
        assert!(v("535.261.03") >= v("535") && v("535.261.03") < v("536"));
        assert!(v("570.26") < v("570.124.06"));
        assert_eq!(v("12.8.1").major_minor(), v("12.8"));
        assert_eq!(v("12.8"), v("12.8.0"));
        assert!(Version::parse("12.x").is_none() && Version::parse("").is_none());
        // Nine digits a part at most: "1234567890" fits a u32 but is no
        // version anyone writes.
        assert!(Version::parse("123456789").is_some());
        assert!(Version::parse("1234567890").is_none());
        assert!(Version::parse("1.2.3.4").is_some() && Version::parse("1.2.3.4.5").is_none());
    }

    #[test]
    fn compute_capability_spellings() {
        let cc = |s| parse_compute_capability(s).map(|(v, _)| v.to_string());
        assert_eq!(cc("sm_120").as_deref(), Some("12.0"));
        assert_eq!(cc("12.0").as_deref(), Some("12.0"));
        assert_eq!(cc("120").as_deref(), Some("12.0"));
        assert_eq!(cc("compute_86").as_deref(), Some("8.6"));
        assert_eq!(
            parse_compute_capability("sm_90a").map(|(_, s)| s),
            Some(Some('a'))
        );
        assert!(cc("sm_").is_none() && cc("1").is_none() && cc("a100").is_none());
        assert!(cc("1000").is_none() && cc("8x").is_none() && cc("sm_9").is_none());
        assert_eq!(cc("sm_100").as_deref(), Some("10.0"));
    }
}
