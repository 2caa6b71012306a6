//! `Create`'s options (`docker volume create -o key=value`, `--mount ...,volume-opt=key=value`,
//! `podman volume create -o key=value`). Every key is in [`KEYS`] (docs/cli.md prints the same
//! table); any other key, and any bad value, is refused naming it before anything is created.

use std::collections::BTreeMap;

use kcsi::parse_bytes;
use kcsi::{Error, Result};

use super::state::check_name;

/// The option table: key, what it does.
pub const KEYS: &[(&str, &str)] = &[
    ("size", "bytes CreateVolume asks for (1Gi, 500M, 1048576)"),
    (
        "volumeHandle",
        "an existing volume's id, used as is and never deleted",
    ),
    (
        "accessMode",
        "ReadWriteOnce (default), ReadWriteOncePod, ReadOnlyMany or ReadWriteMany",
    ),
    (
        "fsType",
        "the filesystem type NodeStage formats and mounts (ext4, xfs)",
    ),
    (
        "mountOptions",
        "comma-separated mount flags for NodeStage and NodePublish",
    ),
    (
        "block",
        "true: a raw block volume, each container gets the device",
    ),
    (
        "parameter.KEY",
        "CreateVolume parameter KEY (a StorageClass parameter)",
    ),
    (
        "attribute.KEY",
        "volume attribute KEY for NodeStage and NodePublish",
    ),
    (
        "secrets",
        "NAME: the secrets file NAME.json in the plugin's --secrets-dir",
    ),
];

/// The Kubernetes access modes a volume can take (`kcsi::access_mode` maps them to CSI's).
const ACCESS_MODES: &[&str] = &[
    "ReadWriteOnce",
    "ReadWriteOncePod",
    "ReadOnlyMany",
    "ReadWriteMany",
];

/// What `Create` is asked for.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    /// `size`: bytes for CreateVolume.
    pub size: Option<i64>,
    /// `volumeHandle`: an existing volume, used as is and never deleted.
    pub volume_handle: Option<String>,
    pub access_mode: String,
    pub fs_type: Option<String>,
    pub mount_options: Vec<String>,
    pub block: bool,
    pub parameters: BTreeMap<String, String>,
    pub attributes: BTreeMap<String, String>,
    /// The name of the secrets file in the operator's directory (never its content).
    pub secrets: Option<String>,
}

impl Default for Plan {
    fn default() -> Plan {
        Plan {
            size: None,
            volume_handle: None,
            access_mode: ACCESS_MODES[0].to_string(),
            fs_type: None,
            mount_options: Vec::new(),
            block: false,
            parameters: BTreeMap::new(),
            attributes: BTreeMap::new(),
            secrets: None,
        }
    }
}

const MAX_VALUE: usize = 4096;
/// The parameters the external-provisioner keeps for itself (and strips before CreateVolume).
const RESERVED_PREFIX: &str = "csi.storage.k8s.io/";

fn bad(key: &str, value: &str, why: &str) -> Error {
    Error::invalid(format!("option {key}={value:?} is not valid: {why}"))
}

fn unknown(key: &str) -> Error {
    let keys: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
    Error::invalid(format!(
        "option {key:?} is not known: the options are {}",
        keys.join(", ")
    ))
}

/// A `parameter.` or `attribute.` key's KEY: a Kubernetes-like map key.
fn sub_key<'k>(key: &'k str, prefix: &str) -> Result<Option<&'k str>> {
    let Some(sub) = key.strip_prefix(prefix) else {
        return Ok(None);
    };
    let ok = !sub.is_empty()
        && sub.len() <= 253
        && sub
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if !ok {
        return Err(Error::invalid(format!(
            "option key {key:?} is not valid: {prefix}KEY takes a KEY of letters, digits, \
             '-', '_', '.' and '/'"
        )));
    }
    Ok(Some(sub))
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
        if let Some(k) = sub_key(key, "parameter.")? {
            if k.starts_with(RESERVED_PREFIX) {
                return Err(bad(
                    key,
                    value,
                    "csi.storage.k8s.io/ parameters are the provisioner's own; use the \
                     fsType and secrets options",
                ));
            }
            plan.parameters.insert(k.to_string(), value.clone());
            continue;
        }
        if let Some(k) = sub_key(key, "attribute.")? {
            plan.attributes.insert(k.to_string(), value.clone());
            continue;
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
            "accessMode" => {
                if !ACCESS_MODES.contains(&value.as_str()) {
                    return Err(bad(
                        key,
                        value,
                        &format!("it is one of {}", ACCESS_MODES.join(", ")),
                    ));
                }
                plan.access_mode = value.clone();
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
            "secrets" => {
                check_name("option secrets", value)?;
                plan.secrets = Some(value.clone());
            }
            _ => return Err(unknown(key)),
        }
    }
    if plan.size.is_some() && plan.volume_handle.is_some() {
        return Err(Error::invalid(
            "options size and volumeHandle exclude each other: size creates a volume, \
             volumeHandle uses an existing one",
        ));
    }
    if !plan.parameters.is_empty() && plan.volume_handle.is_some() {
        return Err(Error::invalid(
            "options parameter.KEY and volumeHandle exclude each other: parameters go to \
             CreateVolume, volumeHandle uses an existing volume",
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
    fn every_key_of_the_table_is_read() {
        let plan = parse(&opts(&[
            ("size", "1Gi"),
            ("accessMode", "ReadWriteMany"),
            ("fsType", "ext4"),
            ("mountOptions", "noatime,nodev"),
            ("parameter.type", "fast"),
            ("parameter.example.com/zone", "a"),
            ("attribute.tier", "gold"),
            ("secrets", "team-a"),
        ]))
        .unwrap();
        assert_eq!(plan.size, Some(1 << 30));
        assert_eq!(plan.access_mode, "ReadWriteMany");
        assert_eq!(plan.fs_type.as_deref(), Some("ext4"));
        assert_eq!(plan.mount_options, vec!["noatime", "nodev"]);
        assert_eq!(
            plan.parameters,
            opts(&[("type", "fast"), ("example.com/zone", "a")])
        );
        assert_eq!(plan.attributes, opts(&[("tier", "gold")]));
        assert_eq!(plan.secrets.as_deref(), Some("team-a"));
        let defaults = parse(&BTreeMap::new()).unwrap();
        assert_eq!(defaults, Plan::default());
        assert_eq!(defaults.access_mode, "ReadWriteOnce");
        let handle = parse(&opts(&[("volumeHandle", "h"), ("block", "true")])).unwrap();
        assert_eq!(
            (handle.volume_handle.as_deref(), handle.block),
            (Some("h"), true)
        );
    }

    #[test]
    fn bad_keys_and_values_name_the_option_and_why() {
        for (pairs, needle) in [
            (vec![("size", "lots")], "size=\"lots\""),
            (vec![("size", "0")], "more than 0"),
            (vec![("size", "-1Gi")], "size="),
            (vec![("block", "yes")], "true or false"),
            (vec![("fsType", "ext4;rm")], "letters and digits"),
            (vec![("mountOptions", "a,,b")], "comma-separated"),
            (vec![("volumeHandle", "")], "non-empty"),
            (vec![("accessMode", "rwx")], "accessMode=\"rwx\""),
            (vec![("tier", "gold")], "option \"tier\" is not known"),
            (vec![("parameter.", "x")], "\"parameter.\" is not valid"),
            (
                vec![("attribute.a b", "x")],
                "\"attribute.a b\" is not valid",
            ),
            (
                vec![("parameter.csi.storage.k8s.io/fstype", "xfs")],
                "provisioner's own",
            ),
            (vec![("secrets", "../etc/x")], "option secrets"),
            (
                vec![("size", "1Gi"), ("volumeHandle", "h")],
                "exclude each other",
            ),
            (
                vec![("parameter.type", "a"), ("volumeHandle", "h")],
                "exclude each other",
            ),
            (vec![("block", "true"), ("fsType", "ext4")], "no filesystem"),
            (vec![("", "x")], "option key"),
        ] {
            let err = parse(&opts(&pairs)).unwrap_err();
            assert!(err.message().contains(needle), "{pairs:?}: {err}");
        }
    }

    #[test]
    fn every_key_is_a_row_of_the_option_table_in_docs_cli_md() {
        let doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md"));
        for (key, _) in KEYS {
            let row = format!("| `{key}` |");
            assert!(doc.contains(&row), "docs/cli.md has no option row {row}");
        }
    }

    #[test]
    fn an_unknown_key_lists_every_key_of_the_table() {
        let err = parse(&opts(&[("sise", "1Gi")])).unwrap_err();
        for (key, _) in KEYS {
            assert!(err.message().contains(key), "{key} not in: {err}");
        }
    }
}
