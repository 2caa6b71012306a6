//! `Create`'s options (`podman volume create -o key=value`, `docker volume create --opt`):
//! the few kcsi reads itself, and every other key as a volume attribute.

use std::collections::BTreeMap;

use kcsi::parse_bytes;
use kcsi::{Error, Result};

/// What `Create` is asked for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// `size`: bytes for CreateVolume.
    pub size: Option<i64>,
    /// `volumeHandle`: an existing volume, used as is and never deleted.
    pub volume_handle: Option<String>,
    pub fs_type: Option<String>,
    pub mount_options: Vec<String>,
    pub block: bool,
    pub attributes: BTreeMap<String, String>,
}

const MAX_VALUE: usize = 4096;

fn bad(key: &str, value: &str, why: &str) -> Error {
    Error::invalid(format!("option {key}={value:?} is not valid: {why}"))
}

pub fn parse(opts: &BTreeMap<String, String>) -> Result<Plan> {
    let mut plan = Plan::default();
    for (key, value) in opts {
        if key.is_empty() || key.chars().any(char::is_control) {
            return Err(Error::invalid(format!(
                "option key {key:?} is not valid: it must be non-empty text"
            )));
        }
        if value.len() > MAX_VALUE || value.contains('\0') {
            return Err(bad(key, value, "longer than 4096 bytes or holding a NUL"));
        }
        match key.as_str() {
            "size" => {
                let bytes = parse_bytes(value).map_err(|e| bad(key, value, e.message()))?;
                if bytes <= 0 {
                    return Err(bad(key, value, "the size must be more than 0 bytes"));
                }
                plan.size = Some(bytes);
            }
            "volumeHandle" => {
                if value.is_empty() || value.chars().any(char::is_control) {
                    return Err(bad(key, value, "a volume handle is non-empty text"));
                }
                plan.volume_handle = Some(value.clone());
            }
            "fsType" => {
                if value.is_empty() || !value.chars().all(|c| c.is_ascii_alphanumeric()) {
                    return Err(bad(key, value, "a filesystem type is letters and digits"));
                }
                plan.fs_type = Some(value.clone());
            }
            "mountOptions" => {
                plan.mount_options = value.split(',').map(str::to_string).collect();
                if plan
                    .mount_options
                    .iter()
                    .any(|o| o.is_empty() || o.chars().any(|c| c.is_control() || c == ' '))
                {
                    return Err(bad(
                        key,
                        value,
                        "a comma-separated list of non-empty options without spaces",
                    ));
                }
            }
            "block" => {
                plan.block = match value.as_str() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad(key, value, "it is true or false")),
                }
            }
            _ => {
                plan.attributes.insert(key.clone(), value.clone());
            }
        }
    }
    if plan.size.is_some() && plan.volume_handle.is_some() {
        return Err(Error::invalid(
            "options size and volumeHandle exclude each other: size creates a volume, \
             volumeHandle uses an existing one",
        ));
    }
    if plan.block && (plan.fs_type.is_some() || !plan.mount_options.is_empty()) {
        return Err(Error::invalid(
            "option block=true excludes fsType and mountOptions: a block volume has no filesystem",
        ));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn known_options_are_read_and_the_rest_are_attributes() {
        let plan = parse(&opts(&[
            ("size", "1Gi"),
            ("fsType", "ext4"),
            ("mountOptions", "noatime,nodev"),
            ("tier", "fast"),
        ]))
        .unwrap();
        assert_eq!(plan.size, Some(1 << 30));
        assert_eq!(plan.fs_type.as_deref(), Some("ext4"));
        assert_eq!(plan.mount_options, vec!["noatime", "nodev"]);
        assert_eq!(plan.attributes, opts(&[("tier", "fast")]));
        assert_eq!(parse(&BTreeMap::new()).unwrap(), Plan::default());
    }

    #[test]
    fn bad_values_name_the_option_and_why() {
        for (pairs, needle) in [
            (vec![("size", "lots")], "size=\"lots\""),
            (vec![("size", "0")], "more than 0"),
            (vec![("size", "-1Gi")], "size="),
            (vec![("block", "yes")], "true or false"),
            (vec![("fsType", "ext4;rm")], "letters and digits"),
            (vec![("mountOptions", "a,,b")], "comma-separated"),
            (vec![("volumeHandle", "")], "non-empty"),
            (
                vec![("size", "1Gi"), ("volumeHandle", "h")],
                "exclude each other",
            ),
            (vec![("block", "true"), ("fsType", "ext4")], "no filesystem"),
            (vec![("", "x")], "option key"),
        ] {
            let err = parse(&opts(&pairs)).unwrap_err();
            assert!(err.message().contains(needle), "{pairs:?}: {err}");
        }
    }
}
