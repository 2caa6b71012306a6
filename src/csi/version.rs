//! Plugin version handling exactly as the kubelet does it: `ParseGeneric` from
//! k8s.io/apimachinery/pkg/util/version (lenient, not SemVer) and the CSI plugin's
//! `highestSupportedVersion` rule (2.x and up ignored, the highest must be 1.x).

use std::cmp::Ordering;
use std::fmt;

use crate::goquote::{quote, quote_list};

/// A generic dotted version: two or more numeric components.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    components: Vec<u64>,
}

/// Go's `\s` in RE2 syntax.
fn is_go_space(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\x0c' | '\r' | ' ')
}

impl Version {
    /// `utilversion.ParseGeneric`: `^\s*v?([0-9]+(?:\.[0-9]+)*)(.*)*$`, at least two components,
    /// no leading zero in the first one; anything after the numbers is ignored.
    pub fn parse_generic(s: &str) -> Result<Version, String> {
        let unparsable = || format!("could not parse {} as version", quote(s));
        let rest = s.trim_start_matches(is_go_space);
        let rest = rest.strip_prefix('v').unwrap_or(rest);
        // The numeric part: digits, then ".digits" groups.
        let bytes = rest.as_bytes();
        let mut end = 0;
        let mut last_dot_ok = 0;
        while end < bytes.len() {
            let start = end;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            if end == start {
                break;
            }
            last_dot_ok = end;
            if end < bytes.len() && bytes[end] == b'.' {
                end += 1;
            } else {
                break;
            }
        }
        let numbers = &rest[..last_dot_ok];
        let extra = &rest[last_dot_ok..];
        // `.` in Go's regexp does not match a newline, so such a string does not match at all.
        if numbers.is_empty() || extra.contains('\n') {
            return Err(unparsable());
        }
        let parts: Vec<&str> = numbers.split('.').collect();
        if parts.len() < 2 {
            return Err(format!("illegal version string {}", quote(s)));
        }
        let mut components = Vec::with_capacity(parts.len());
        for (i, comp) in parts.iter().enumerate() {
            if i == 0 && comp.starts_with('0') && *comp != "0" {
                return Err(format!(
                    "illegal zero-prefixed version component {} in {}",
                    quote(comp),
                    quote(s)
                ));
            }
            let n = comp.parse::<u64>().map_err(|_| {
                format!(
                    "illegal non-numeric version component {} in {}: strconv.ParseUint: parsing {}: value out of range",
                    quote(comp),
                    quote(s),
                    quote(comp)
                )
            })?;
            components.push(n);
        }
        Ok(Version { components })
    }

    pub fn major(&self) -> u64 {
        self.components[0]
    }
}

impl Ord for Version {
    /// Component-wise numeric order; missing components count as zero.
    fn cmp(&self, other: &Self) -> Ordering {
        let n = self.components.len().max(other.components.len());
        for i in 0..n {
            let a = self.components.get(i).copied().unwrap_or(0);
            let b = other.components.get(i).copied().unwrap_or(0);
            match a.cmp(&b) {
                Ordering::Equal => continue,
                o => return o,
            }
        }
        Ordering::Equal
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.components.iter().map(u64::to_string).collect();
        f.write_str(&parts.join("."))
    }
}

/// Why no usable version was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionError {
    /// The list was empty.
    Empty,
    /// Nothing usable; the message is upstream's.
    Unsupported(String),
}

/// The kubelet's `highestSupportedVersion`: scans from last to first, skips unparsable and
/// 2.x+ entries, keeps the highest; the result must be 1.x.
pub fn highest_supported_version(versions: &[String]) -> Result<Version, VersionError> {
    if versions.is_empty() {
        return Err(VersionError::Empty);
    }
    let mut highest: Option<Version> = None;
    let mut last_err: Option<String> = None;
    for v in versions.iter().rev() {
        match Version::parse_generic(v) {
            Err(e) => last_err = Some(e),
            Ok(parsed) if parsed.major() > 1 => {}
            Ok(parsed) => {
                if highest.as_ref().is_none_or(|h| *h < parsed) {
                    highest = Some(parsed);
                }
            }
        }
    }
    match highest {
        None => Err(VersionError::Unsupported(format!(
            "could not find a highest supported version from versions ([{}]) reported by this driver: {}",
            versions.join(" "),
            last_err.as_deref().unwrap_or("<nil>")
        ))),
        Some(h) if h.major() != 1 => Err(VersionError::Unsupported(format!(
            "highest supported version reported by driver is {h}, must be v1.x"
        ))),
        Some(h) => Ok(h),
    }
}

/// Upstream's message fragment for a version list, `%q` of a `[]string`.
pub fn quote_versions(versions: &[String]) -> String {
    quote_list(versions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Result<Version, String> {
        Version::parse_generic(s)
    }

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parse_generic_accepts_kubelet_forms() {
        assert_eq!(v("v1.2.3").unwrap().to_string(), "1.2.3");
        assert_eq!(v("1.0").unwrap().to_string(), "1.0");
        assert_eq!(v("  v1.0.0-alpha+x").unwrap().to_string(), "1.0.0");
        assert_eq!(v("1.5.x").unwrap().to_string(), "1.5");
    }

    #[test]
    fn parse_generic_rejects_what_the_kubelet_rejects() {
        assert!(v("1").unwrap_err().starts_with("illegal version string"));
        assert!(v("01.0").unwrap_err().starts_with("illegal zero-prefixed"));
        assert!(v("var").unwrap_err().starts_with("could not parse"));
        assert!(v("").is_err());
        assert!(v("1.0\n").is_err());
        assert!(v("99999999999999999999.0").is_err());
    }

    #[test]
    fn versions_compare_component_wise() {
        assert!(v("1.0.1").unwrap() > v("1.0.0").unwrap());
        assert_eq!(v("1.0").unwrap().cmp(&v("1.0.0").unwrap()), Ordering::Equal);
        assert!(v("1.10.0").unwrap() > v("1.9.9").unwrap());
    }

    #[test]
    fn highest_supported_version_follows_upstream_table() {
        let ok = [
            vec!["v1.0.0"],
            vec!["0.2.0", "v1.0.0"],
            vec!["0.2.0", "v1.2.3"],
            vec!["v1.2.3", "v0.3.0"],
            vec!["v1.2.3", "v0.3.0", "2.0.1"],
            vec!["v1.2.3", "4.9.12", "v0.3.0", "2.0.1"],
            vec!["v1.2.3", "boo", "v0.3.0", "2.0.1"],
        ];
        for case in ok {
            assert!(highest_supported_version(&list(&case)).is_ok(), "{case:?}");
        }
        let bad = [
            vec!["0.3.0"],
            vec!["0.2.0"],
            vec!["0.2.0", "v0.3.0"],
            vec!["4.9.12", "2.0.1"],
            vec!["var", "boo", "foo"],
        ];
        for case in bad {
            assert!(highest_supported_version(&list(&case)).is_err(), "{case:?}");
        }
        assert_eq!(highest_supported_version(&[]), Err(VersionError::Empty));
        assert_eq!(
            highest_supported_version(&list(&["v1.2.3", "v1.10.0", "1.9"]))
                .unwrap()
                .to_string(),
            "1.10.0"
        );
    }

    #[test]
    fn only_zero_x_reports_must_be_v1() {
        let err = highest_supported_version(&list(&["0.3.0"])).unwrap_err();
        assert_eq!(
            err,
            VersionError::Unsupported(
                "highest supported version reported by driver is 0.3.0, must be v1.x".into()
            )
        );
    }
}
