//! `NVIDIA_REQUIRE_CUDA`: the rule an image sets so the NVIDIA container
//! runtime refuses to start it on a host that can't run it.
//!
//! Grammar (libnvidia-container `src/cli/dsl.c`, nvidia-container-toolkit
//! `internal/requirements`): alternatives separated by whitespace are OR-ed;
//! each alternative is conditions separated by commas, AND-ed; a condition is
//! `property operator value` with properties `cuda`, `driver`, `arch` (versions)
//! and `brand` (a name), operators `= != < <= > >=`. No crate parses this DSL,
//! so it is written here (small, and fuzzed by proptest in compat/verdict/tests/).

use std::fmt;

use super::version::Version;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Property {
    Cuda,
    Driver,
    Arch,
    Brand,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// One `property operator value` test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub property: Property,
    pub operator: Operator,
    pub value: String,
}

/// A parsed rule: OR of AND-ed conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequireRule {
    pub alternatives: Vec<Vec<Condition>>,
}

/// What the runtime knows about the host when it checks a rule.
#[derive(Debug, Clone)]
pub struct RuntimeFacts<'a> {
    /// The newest CUDA the driver supports.
    pub cuda: Option<Version>,
    pub driver: Option<Version>,
    /// The GPU's compute capability.
    pub arch: Option<Version>,
    /// Brand names the GPU may report (see `brands_for_class`).
    pub brands: &'a [&'a str],
}

/// The outcome: satisfied, or the condition that failed first in each alternative.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Satisfied,
    Unsatisfied {
        first_failed: String,
        alternatives: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for ParseError {}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let property = match self.property {
            Property::Cuda => "cuda",
            Property::Driver => "driver",
            Property::Arch => "arch",
            Property::Brand => "brand",
        };
        let operator = match self.operator {
            Operator::Eq => "=",
            Operator::Ne => "!=",
            Operator::Lt => "<",
            Operator::Le => "<=",
            Operator::Gt => ">",
            Operator::Ge => ">=",
        };
        write!(f, "{property}{operator}{}", self.value)
    }
}

fn parse_condition(text: &str) -> Result<Condition, ParseError> {
    let split_at = text
        .find(['=', '!', '<', '>'])
        .ok_or_else(|| ParseError(format!("`{text}` has no operator (= != < <= > >=)")))?;
    let (name, rest) = text.split_at(split_at);
    let property = match name.to_ascii_lowercase().as_str() {
        "cuda" => Property::Cuda,
        "driver" => Property::Driver,
        "arch" => Property::Arch,
        "brand" => Property::Brand,
        other => {
            return Err(ParseError(format!(
                "unknown property `{other}` in `{text}` (expected cuda, driver, arch or brand)"
            )))
        }
    };
    let (operator, value) = [
        ("<=", Operator::Le),
        (">=", Operator::Ge),
        ("!=", Operator::Ne),
        ("<", Operator::Lt),
        (">", Operator::Gt),
        ("=", Operator::Eq),
    ]
    .iter()
    .find_map(|(token, op)| rest.strip_prefix(token).map(|value| (*op, value)))
    .ok_or_else(|| ParseError(format!("bad operator in `{text}`")))?;
    if value.is_empty() || value.contains(['=', '!', '<', '>']) {
        return Err(ParseError(format!("bad value in `{text}`")));
    }
    if property != Property::Brand && Version::parse(value).is_none() {
        return Err(ParseError(format!(
            "`{value}` in `{text}` is not a version"
        )));
    }
    if property == Property::Brand && !matches!(operator, Operator::Eq | Operator::Ne) {
        return Err(ParseError(format!("brand only takes = or != in `{text}`")));
    }
    Ok(Condition {
        property,
        operator,
        value: value.to_string(),
    })
}

impl RequireRule {
    pub fn parse(text: &str) -> Result<RequireRule, ParseError> {
        let alternatives = text
            .split_whitespace()
            .map(|alternative| alternative.split(',').map(parse_condition).collect())
            .collect::<Result<Vec<Vec<Condition>>, ParseError>>()?;
        if alternatives.is_empty() {
            return Err(ParseError("empty NVIDIA_REQUIRE_CUDA rule".into()));
        }
        Ok(RequireRule { alternatives })
    }

    /// Check the rule as the NVIDIA runtime would. An unknown host fact makes
    /// a condition on it fail (the runtime can't prove it holds).
    pub fn evaluate(&self, facts: &RuntimeFacts) -> Outcome {
        let mut first_failed = None;
        for alternative in &self.alternatives {
            match alternative.iter().find(|c| !condition_holds(c, facts)) {
                None => return Outcome::Satisfied,
                Some(failed) => {
                    first_failed.get_or_insert_with(|| failed.to_string());
                }
            }
        }
        Outcome::Unsatisfied {
            first_failed: first_failed.unwrap_or_default(),
            alternatives: self.alternatives.len(),
        }
    }
}

fn condition_holds(condition: &Condition, facts: &RuntimeFacts) -> bool {
    if condition.property == Property::Brand {
        let has = facts
            .brands
            .iter()
            .any(|b| b.eq_ignore_ascii_case(&condition.value));
        return if condition.operator == Operator::Eq {
            has
        } else {
            !has
        };
    }
    let host = match condition.property {
        Property::Cuda => facts.cuda.as_ref(),
        Property::Driver => facts.driver.as_ref(),
        _ => facts.arch.as_ref(),
    };
    let (Some(host), Some(wanted)) = (host, Version::parse(&condition.value)) else {
        return false;
    };
    let order = host.cmp(&wanted);
    match condition.operator {
        Operator::Eq => order.is_eq(),
        Operator::Ne => order.is_ne(),
        Operator::Lt => order.is_lt(),
        Operator::Le => order.is_le(),
        Operator::Gt => order.is_gt(),
        Operator::Ge => order.is_ge(),
    }
}

/// The brand names a GPU of this class reports to the runtime (NVML brand).
/// Our mapping, documented in docs/doctor.md: datacenter → tesla; workstation
/// → quadro / quadrortx / nvidiartx / nvidia (older and newer pro brands);
/// consumer → geforce / geforcertx / titan / titanrtx; embedded (Jetson) and
/// unknown → unknown.
pub fn brands_for_class(class: Option<crate::host::GpuClass>) -> &'static [&'static str] {
    use crate::host::GpuClass;
    match class {
        Some(GpuClass::Datacenter) => &["tesla"],
        Some(GpuClass::Workstation) => &["quadro", "quadrortx", "nvidiartx", "nvidia"],
        Some(GpuClass::Consumer) => &["geforce", "geforcertx", "titan", "titanrtx"],
        Some(GpuClass::Embedded) | None => &["unknown"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(cuda: &str, driver: &str, brands: &'a [&'a str]) -> RuntimeFacts<'a> {
        RuntimeFacts {
            cuda: Version::parse(cuda),
            driver: Version::parse(driver),
            arch: Version::parse("8.0"),
            brands,
        }
    }

    #[test]
    fn or_of_and_clauses() {
        let rule = RequireRule::parse("cuda>=12.8 brand=tesla,driver>=535,driver<536").unwrap();
        assert_eq!(rule.alternatives.len(), 2);
        assert_eq!(
            rule.evaluate(&facts("12.8", "570.124.06", &["geforce"])),
            Outcome::Satisfied
        );
        assert_eq!(
            rule.evaluate(&facts("12.2", "535.261.03", &["tesla"])),
            Outcome::Satisfied
        );
        match rule.evaluate(&facts("12.2", "535.261.03", &["geforce"])) {
            Outcome::Unsatisfied {
                first_failed,
                alternatives,
            } => {
                assert_eq!(first_failed, "cuda>=12.8");
                assert_eq!(alternatives, 2);
            }
            other => panic!("expected unsatisfied, got {other:?}"),
        }
        assert!(matches!(
            rule.evaluate(&facts("12.6", "560.35.03", &["tesla"])),
            Outcome::Unsatisfied { .. }
        ));
    }

    #[test]
    fn garbage_is_an_error() {
        for bad in [
            "",
            "   ",
            "cuda",
            "cuda>=",
            "gpu>=1",
            "cuda>=abc",
            "brand>=tesla",
            "cuda>==12",
            ",",
        ] {
            assert!(RequireRule::parse(bad).is_err(), "{bad:?} should not parse");
        }
        assert!(RequireRule::parse("arch>=7.5 cuda!=12.0").is_ok());
        // A brand is a name, not a version: only its operator and value
        // guard it.
        for bad in ["brand==tesla", "brand=", "brand=!tesla"] {
            assert!(RequireRule::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    /// The error says what is wrong and where, for `doctor`'s message.
    #[test]
    fn parse_errors_name_the_condition() {
        let err = RequireRule::parse("cuda>=12.0 gpu>=1").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown property `gpu` in `gpu>=1` (expected cuda, driver, arch or brand)"
        );
    }

    #[test]
    fn brand_not_equal_excludes_that_brand() {
        let rule = RequireRule::parse("cuda>=12.0,brand!=geforce").unwrap();
        assert_eq!(
            rule.evaluate(&facts("12.8", "570.124.06", &["tesla"])),
            Outcome::Satisfied
        );
        assert_eq!(
            rule.evaluate(&facts("12.8", "570.124.06", &["GeForce"])),
            Outcome::Unsatisfied {
                first_failed: "brand!=geforce".into(),
                alternatives: 1
            }
        );
    }

    /// The NVML brands per class, as docs/doctor.md lists them.
    #[test]
    fn brands_follow_the_gpu_class() {
        use crate::host::GpuClass;
        assert_eq!(brands_for_class(Some(GpuClass::Datacenter)), ["tesla"]);
        assert_eq!(
            brands_for_class(Some(GpuClass::Workstation)),
            ["quadro", "quadrortx", "nvidiartx", "nvidia"]
        );
        assert_eq!(
            brands_for_class(Some(GpuClass::Consumer)),
            ["geforce", "geforcertx", "titan", "titanrtx"]
        );
        assert_eq!(brands_for_class(Some(GpuClass::Embedded)), ["unknown"]);
        assert_eq!(brands_for_class(None), ["unknown"]);
    }
}
