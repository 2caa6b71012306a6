//! Names kcsi puts into a path: one component (a pod UID, a node name, an escaped spec name)
//! or a driver name, which may nest. Refused when they could leave their directory.

use crate::error::{Error, Result};
use crate::goquote::quote;

/// Refuses a single path component that could leave its directory: empty, `.`, `..`, a `/`,
/// a NUL or another control character.
pub fn check_name(what: &str, name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name == "."
        || name == ".."
        || name.contains('/')
        || name.chars().any(char::is_control);
    if bad {
        return Err(Error::invalid(format!(
            "{what} {} is not a safe name: it must be non-empty, not \".\" or \"..\", and \
             contain no \"/\" or control characters",
            quote(name)
        )));
    }
    Ok(())
}

/// Driver names may nest (upstream does not escape them under `plugins/kubernetes.io/csi/`),
/// but no component may be empty, `.` or `..`, and the name may not be absolute.
pub fn check_driver_name(name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name.starts_with('/')
        || name.chars().any(char::is_control)
        || name
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        return Err(Error::invalid(format!(
            "driver name {} is not safe: it must be non-empty, relative, free of control \
             characters, and have no empty, \".\" or \"..\" path components",
            quote(name)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_leave_their_dir_are_refused() {
        for bad in ["", ".", "..", "a/b", "u\0", "a\nb"] {
            assert!(check_name("pod UID", bad).is_err(), "{bad:?}");
        }
        assert!(check_name("pod UID", "test-pod").is_ok());
        for bad in ["", "/abs", "../x", "a//b", "a/./b"] {
            assert!(check_driver_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_driver_name("com.example.csi/driver1").is_ok());
    }
}
