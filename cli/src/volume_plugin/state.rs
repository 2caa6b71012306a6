//! The volumes the plugin knows, one description file each under `<root>/volumes/<name>.json`,
//! their callers' Mount calls not yet balanced, one file each under `<root>/mounts/<name>.json`,
//! and the attachments of a driver that needs ControllerPublishVolume, one file each under
//! `<root>/attachments/<name>.json`; all written atomically (temp file, fsync, rename, fsync of the
//! dir) through kcsi's confined file operations, so a plugin killed mid-write leaves the old
//! file or the new one. What is mounted is not recorded here: it is read back from the kubelet
//! side's own `vol_data.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use kcsi::{Beneath, Entry};
use kcsi::{Error, ErrorKind, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::attach::Attachment;
use super::counts::Counts;

const SUFFIX: &str = ".json";
const TEMP_SUFFIX: &str = ".tmp";
/// A description is a few hundred bytes, and counts a line per caller; anything much larger
/// is not one of ours.
const MAX_FILE: u64 = 1 << 20;
const MAX_NAME: usize = 128;

/// One volume as `Create` made it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Description {
    pub name: String,
    pub driver: String,
    pub volume_handle: String,
    /// Made by this plugin's CreateVolume, so `Remove` deletes it; a given handle never is.
    pub created_by_kcsi: bool,
    #[serde(default)]
    pub capacity_bytes: i64,
    #[serde(default)]
    pub fs_type: Option<String>,
    #[serde(default)]
    pub mount_options: Vec<String>,
    #[serde(default)]
    pub block: bool,
    /// The Kubernetes access mode (`accessMode`).
    #[serde(default = "read_write_once")]
    pub access_mode: String,
    /// The name of its secrets file in the operator's `--secrets-dir`; never the secrets.
    #[serde(default)]
    pub secrets: Option<String>,
    /// The volume attributes NodeStage and NodePublish carry (the driver's volume context,
    /// then the caller's `-o key=value`).
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
    /// The options `Create` was called with, to tell a repeated Create from a conflicting one.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    pub created_at: String,
}

fn read_write_once() -> String {
    "ReadWriteOnce".to_string()
}

/// Volume names as Docker and Podman accept them: `[A-Za-z0-9][A-Za-z0-9_.-]*`, so a name is
/// always one plain path component (never `.`, `..` or hidden).
pub fn check_name(what: &str, name: &str) -> Result<()> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !first_ok || !rest_ok || name.len() > MAX_NAME {
        return Err(Error::invalid(format!(
            "{what} {name:?} is not valid: it must match [A-Za-z0-9][A-Za-z0-9_.-]* and be at \
             most {MAX_NAME} bytes"
        )));
    }
    Ok(())
}

pub struct Store {
    root: PathBuf,
    dir: PathBuf,
    mounts_dir: PathBuf,
    attachments_dir: PathBuf,
    temp_seq: AtomicU64,
}

impl Store {
    /// Opens (creating) `<root>/volumes`, `<root>/mounts` and `<root>/attachments`, and removes the temp files a
    /// killed plugin left there.
    pub fn open(root: &Path) -> Result<Store> {
        let store = Store {
            root: root.to_path_buf(),
            dir: root.join("volumes"),
            mounts_dir: root.join("mounts"),
            attachments_dir: root.join("attachments"),
            temp_seq: AtomicU64::new(0),
        };
        let fs = store.fs()?;
        for dir in [&store.dir, &store.mounts_dir, &store.attachments_dir] {
            fs.mkdir_all(dir, 0o700)?;
            for name in fs.list(dir)? {
                let name = name.to_string_lossy();
                if name.starts_with('.') && name.ends_with(TEMP_SUFFIX) {
                    fs.remove_file(&dir.join(&*name), "cannot remove a stale temp file")?;
                }
            }
        }
        Ok(store)
    }

    fn fs(&self) -> Result<Beneath> {
        Beneath::open(&self.root)
    }

    /// The description file of volume `name` (a checked name).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}{SUFFIX}"))
    }

    /// The counts file of volume `name` (a checked name).
    pub fn counts_path(&self, name: &str) -> PathBuf {
        self.mounts_dir.join(format!("{name}{SUFFIX}"))
    }

    /// The attachment file of volume `name` (a checked name).
    pub fn attachment_path(&self, name: &str) -> PathBuf {
        self.attachments_dir.join(format!("{name}{SUFFIX}"))
    }

    /// The JSON file at `path` (`what` of volume `name`), `None` when there is none.
    fn read<T: DeserializeOwned>(&self, path: &Path, what: &str, name: &str) -> Result<Option<T>> {
        let fs = self.fs()?;
        match fs.entry(path)? {
            Entry::Missing => return Ok(None),
            Entry::File => {}
            Entry::Dir | Entry::Other => {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "the {what} of volume {name} ({}) is not a regular file",
                        path.display()
                    ),
                ))
            }
        }
        let text = fs.read_to_string(path, &format!("cannot read the volume {what}"), MAX_FILE)?;
        let v = serde_json::from_str(&text).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!(
                    "the {what} of volume {name} ({}) is not valid: {e}",
                    path.display()
                ),
            )
        })?;
        Ok(Some(v))
    }

    /// Writes `value` to `dir/<name>.json` atomically and durably (`what` names it in errors).
    fn write<T: Serialize>(&self, dir: &Path, name: &str, what: &str, value: &T) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(value).map_err(|e| {
            Error::internal(format!("cannot encode the {what} of volume {name}: {e}"))
        })?;
        let temp = format!(
            ".{name}{SUFFIX}.{}.{}{TEMP_SUFFIX}",
            std::process::id(),
            self.temp_seq.fetch_add(1, Ordering::Relaxed)
        );
        self.fs()?
            .write_atomic(dir, &format!("{name}{SUFFIX}"), dir, &temp, &bytes)
            .and_then(|sync| sync.wait())
            .map_err(|e| e.context(format!("cannot save the {what} of volume {name}")))
    }

    /// The description of `name`, `None` when there is none.
    pub fn load(&self, name: &str) -> Result<Option<Description>> {
        check_name("volume name", name)?;
        let path = self.path(name);
        let Some(d) = self.read::<Description>(&path, "description", name)? else {
            return Ok(None);
        };
        if d.name != name {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "the description {} names volume {:?}, not {name:?}",
                    path.display(),
                    d.name
                ),
            ));
        }
        Ok(Some(d))
    }

    pub fn save(&self, d: &Description) -> Result<()> {
        check_name("volume name", &d.name)?;
        self.write(&self.dir, &d.name, "description", d)
    }

    /// The Mount calls of volume `name` not yet balanced (none when there is no file).
    pub fn load_counts(&self, name: &str) -> Result<Counts> {
        check_name("volume name", name)?;
        Ok(self
            .read(&self.counts_path(name), "mount counts", name)?
            .unwrap_or_default())
    }

    /// Keeps `counts` for volume `name`; no counts left is no file.
    pub fn save_counts(&self, name: &str, counts: &Counts) -> Result<()> {
        check_name("volume name", name)?;
        if counts.is_empty() {
            return self
                .fs()?
                .remove_file(&self.counts_path(name), "cannot remove the mount counts");
        }
        self.write(&self.mounts_dir, name, "mount counts", counts)
    }

    /// The attachment of volume `name`, `None` when it is not attached.
    pub fn load_attachment(&self, name: &str) -> Result<Option<Attachment>> {
        check_name("volume name", name)?;
        self.read(&self.attachment_path(name), "attachment", name)
    }

    pub fn save_attachment(&self, name: &str, a: &Attachment) -> Result<()> {
        check_name("volume name", name)?;
        self.write(&self.attachments_dir, name, "attachment", a)
    }

    pub fn remove_attachment(&self, name: &str) -> Result<()> {
        check_name("volume name", name)?;
        self.fs()?
            .remove_file(&self.attachment_path(name), "cannot remove the attachment")
    }

    /// Removes the description of `name`, its counts and its attachment.
    pub fn remove(&self, name: &str) -> Result<()> {
        check_name("volume name", name)?;
        let fs = self.fs()?;
        fs.remove_file(&self.counts_path(name), "cannot remove the mount counts")?;
        fs.remove_file(&self.attachment_path(name), "cannot remove the attachment")?;
        fs.remove_file(&self.path(name), "cannot remove the volume description")
    }

    /// Every volume's name, sorted (files that are not `<valid name>.json` are not ours).
    pub fn names(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .fs()?
            .list(&self.dir)?
            .into_iter()
            .filter_map(|f| {
                let f = f.to_str()?;
                let name = f.strip_suffix(SUFFIX)?;
                check_name("volume name", name).ok()?;
                Some(name.to_string())
            })
            .collect();
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn description(name: &str) -> Description {
        Description {
            name: name.into(),
            driver: "d".into(),
            volume_handle: "h".into(),
            created_by_kcsi: true,
            capacity_bytes: 1,
            fs_type: None,
            mount_options: vec![],
            block: false,
            access_mode: "ReadWriteOnce".into(),
            secrets: None,
            attributes: BTreeMap::new(),
            options: BTreeMap::new(),
            created_at: "now".into(),
        }
    }

    #[test]
    fn names_outside_docker_rules_are_refused() {
        for bad in [
            "",
            "../x",
            ".hidden",
            "a/b",
            "-a",
            "a b",
            "é",
            &"a".repeat(129),
        ] {
            assert!(check_name("volume name", bad).is_err(), "{bad:?}");
        }
        for good in ["a", "data", "my_vol.1-2", &"a".repeat(128)] {
            assert!(check_name("volume name", good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn store_saves_loads_lists_and_removes_and_refuses_garbage() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open(root.path()).unwrap();
        store.save(&description("b")).unwrap();
        store.save(&description("a")).unwrap();
        assert_eq!(store.load("a").unwrap(), Some(description("a")));
        assert_eq!(store.load("zz").unwrap(), None);
        std::fs::write(store.path("bad"), "{not json").unwrap();
        std::fs::write(root.path().join("volumes/.a.json.1.2.tmp"), "x").unwrap();
        std::fs::write(root.path().join("volumes/other"), "x").unwrap();
        assert_eq!(store.names().unwrap(), vec!["a", "b", "bad"]);
        let err = store.load("bad").unwrap_err();
        assert!(err.message().contains("is not valid"), "{err}");
        std::fs::write(
            store.path("c"),
            serde_json::to_vec(&description("d")).unwrap(),
        )
        .unwrap();
        assert!(store
            .load("c")
            .unwrap_err()
            .message()
            .contains("names volume"));
        assert!(store.load("../x").is_err());
        store.remove("a").unwrap();
        assert_eq!(store.load("a").unwrap(), None);
        // Reopening removes the temp files a killed plugin left.
        let store = Store::open(root.path()).unwrap();
        assert!(!root.path().join("volumes/.a.json.1.2.tmp").exists());
        assert_eq!(store.names().unwrap(), vec!["b", "bad", "c"]);
    }

    #[test]
    fn counts_are_kept_on_disk_until_none_is_left_or_the_volume_goes() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open(root.path()).unwrap();
        store.save(&description("v")).unwrap();
        assert_eq!(store.load_counts("v").unwrap(), Counts::default());
        let mut counts = Counts::default();
        counts.mount("caller", false);
        counts.mount("caller", true);
        store.save_counts("v", &counts).unwrap();
        // What a restarted plugin reads is what was saved.
        let store = Store::open(root.path()).unwrap();
        assert_eq!(store.load_counts("v").unwrap().of("caller"), 2);
        assert!(store.counts_path("v").exists());
        counts.unmount("caller");
        counts.unmount("caller");
        store.save_counts("v", &counts).unwrap();
        assert!(!store.counts_path("v").exists());

        counts.mount("caller", false);
        store.save_counts("v", &counts).unwrap();
        std::fs::write(root.path().join("mounts/.v.json.1.2.tmp"), "x").unwrap();
        let store = Store::open(root.path()).unwrap();
        assert!(!root.path().join("mounts/.v.json.1.2.tmp").exists());
        store.remove("v").unwrap();
        assert!(!store.counts_path("v").exists());
        assert_eq!(store.load("v").unwrap(), None);

        std::fs::write(store.counts_path("w"), "[1]").unwrap();
        let err = store.load_counts("w").unwrap_err();
        assert!(err.message().contains("mount counts of volume w"), "{err}");
        assert!(store.load_counts("../w").is_err());
    }
}
