//! [`Priority`]: how urgent a job is.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How urgent a job is. Claims take higher priorities first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Stored as 0.
    Low = 0,
    /// Stored as 1; the default.
    #[default]
    Normal = 1,
    /// Stored as 2.
    High = 2,
    /// Stored as 3.
    Critical = 3,
}

impl Priority {
    /// Every priority, lowest first.
    pub const ALL: [Priority; 4] = [Priority::Low, Priority::Normal, Priority::High, Priority::Critical];

    /// The stored integer.
    pub fn as_i16(self) -> i16 {
        self as i16
    }

    /// The priority stored as `n`, or `None` for an out-of-range value.
    pub fn from_i16(n: i16) -> Option<Self> {
        Self::ALL.get(usize::try_from(n).ok()?).copied()
    }

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
            Priority::Critical => "critical",
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Priority {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::invalid("priority", format!("{s:?}: use low, normal, high or critical")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_round_trips() {
        for p in Priority::ALL {
            assert_eq!(Priority::from_i16(p.as_i16()), Some(p));
            assert_eq!(p.as_str().parse::<Priority>().ok(), Some(p));
        }
        assert_eq!(Priority::from_i16(4), None);
        assert_eq!(Priority::from_i16(-1), None);
    }
}
