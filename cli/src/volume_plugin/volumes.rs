//! The volume driver itself: each Docker volume is a CSI volume on one kcsi host, staged once
//! (the kubelet's MountDevice) and published once per caller ID (SetUp, the caller ID standing
//! in for the pod). What is mounted is never kept in memory: it is read back from the
//! `vol_data.json` files under the host's root and rebuilt with kcsi's reconstruction, so a
//! plugin killed with volumes mounted finds them again. Each caller's Mount calls are counted
//! on disk (see `counts`), so Docker's nested Mounts survive a killed plugin too. Calls on
//! one volume are serialised.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kcsi::access_mode;
use kcsi::inventory::{self, Kind};
use kcsi::reconstruct::construct_volume_spec;
use kcsi::sha256_hex;
use kcsi::unique_volume_name;
use kcsi::NodeAgent;
use kcsi::SecretsFile;
use kcsi::VolumeLocks;
use kcsi::{Error, ErrorKind, Result};
use serde_json::{json, Value};
use tonic::transport::Channel;

use super::counts::Counts;
use super::options;
use super::state::{check_name, Description, Store};
use crate::args::VolumeArgs;
use crate::driver::{self, NewVolume};
use crate::kubelet;
use crate::node;

/// What the plugin learnt of its driver at start.
pub struct DriverSide {
    /// The CSI driver's name, from GetPluginInfo.
    pub name: String,
    pub channel: Channel,
    /// The driver has a Controller service: `Create` without a handle calls CreateVolume.
    pub can_create: bool,
    /// Its Controller service has PUBLISH_UNPUBLISH_VOLUME (see `attach`).
    pub attach: bool,
    /// NodeGetInfo's node ID and accessible topology.
    pub node_id: String,
    pub topology: Option<BTreeMap<String, String>>,
    pub timeout: Duration,
}

pub struct Plugin {
    /// The plugin's name (`--name`), prefixing the names of the volumes it creates.
    pub name: String,
    /// The kubelet side (its host: paths, drivers, volume calls).
    pub host: NodeAgent,
    pub side: DriverSide,
    pub store: Store,
    /// The operator's directory of secrets files (`--secrets-dir`).
    pub secrets_dir: Option<PathBuf>,
    pub(super) locks: VolumeLocks,
    /// Held (shared) by every call under way, so a stopping plugin can wait for them.
    pub busy: tokio::sync::RwLock<()>,
}

/// One caller's publish of a volume, as found on disk.
#[derive(Debug)]
pub struct Publish {
    pub pod_uid: String,
    pub path: PathBuf,
    pub mounted: bool,
    /// Why the volume could not be rebuilt from its `vol_data.json`, if it could not.
    pub error: Option<String>,
}

/// The pod UID standing in for caller `id`: the ID itself when it is a plain name (Docker's
/// and Podman's container IDs are 64 hex digits), else a digest of it.
pub fn pod_uid(id: &str) -> String {
    if id.len() <= 64 && check_name("caller ID", id).is_ok() {
        id.to_string()
    } else {
        format!("id-{}", &sha256_hex(&[id])[..32])
    }
}

impl Plugin {
    pub fn new(
        name: String,
        host: NodeAgent,
        side: DriverSide,
        store: Store,
        secrets_dir: Option<PathBuf>,
    ) -> Plugin {
        Plugin {
            name,
            host,
            side,
            store,
            secrets_dir,
            locks: VolumeLocks::default(),
            busy: tokio::sync::RwLock::new(()),
        }
    }

    /// The secrets file a volume names (`-o secrets=NAME`): `NAME.json` in `--secrets-dir`.
    fn secrets_path(&self, d: &Description) -> Result<Option<PathBuf>> {
        let Some(name) = &d.secrets else {
            return Ok(None);
        };
        let dir = self.secrets_dir.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "volume {} takes secrets {name}, but the plugin was started without \
                     --secrets-dir",
                    d.name
                ),
            )
        })?;
        Ok(Some(dir.join(format!("{name}.json"))))
    }

    /// The volume's secrets, read now (never kept): none when it names no secrets file.
    pub(super) fn secrets(&self, d: &Description) -> Result<SecretsFile> {
        match self.secrets_path(d)? {
            Some(path) => SecretsFile::load(&path),
            None => Ok(SecretsFile::default()),
        }
    }

    /// The description of `name`, or a not-found error naming the volume.
    pub(super) fn described(&self, name: &str) -> Result<Description> {
        let d = self
            .store
            .load(name)?
            .ok_or_else(|| Error::not_found(format!("no such volume: {name}")))?;
        if d.driver != self.side.name {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "volume {name} belongs to CSI driver {}, but this plugin serves {}",
                    d.driver, self.side.name
                ),
            ));
        }
        Ok(d)
    }

    /// The volume as the kubelet side takes it, published to `pod_uid` with the attachment's
    /// publish context.
    fn volume(
        &self,
        d: &Description,
        pod_uid: &str,
        publish_context: BTreeMap<String, String>,
    ) -> Result<node::Volume> {
        let args = VolumeArgs {
            name: Some(d.name.clone()),
            block: d.block,
            fs_type: d.fs_type.clone(),
            mount_options: d.mount_options.clone(),
            read_only: d.access_mode == "ReadOnlyMany",
            fs_group: None,
            access_mode: d.access_mode.clone(),
            attributes: d.attributes.clone().into_iter().collect(),
            publish_context: publish_context.into_iter().collect(),
            secrets: self.secrets_path(d)?,
            pod_uid: pod_uid.to_string(),
        };
        node::volume(
            &self.side.name,
            &d.volume_handle,
            &args,
            &BTreeMap::new(),
            self.side.attach,
        )
        .map_err(|e| Error::invalid(e.0))
    }

    /// Whether the volume is staged, as the one walk over the layout defines it.
    pub(super) fn staged(&self, d: &Description) -> Result<bool> {
        let dmp = self
            .host
            .layout()
            .device_mount_path(&self.side.name, &d.volume_handle)?;
        let staged = inventory::walk(self.host.files())?.staged;
        Ok(staged.iter().any(|s| match s.kind {
            Kind::Block => d.block && s.spec_name.as_deref() == Some(d.name.as_str()),
            Kind::Filesystem => !d.block && s.device_mount_path == dmp,
        }))
    }

    /// The volume's publishes found on disk, by pod UID.
    pub fn publishes(&self, d: &Description) -> Result<Vec<Publish>> {
        if d.block {
            let dir = self.host.layout().block_publish_dir(&d.name)?;
            let files = self.host.files().open()?;
            let fs = files.beneath();
            let mut out = Vec::new();
            for uid in fs.list(&dir)? {
                let uid = uid.to_string_lossy().into_owned();
                let path = self.host.layout().block_publish_path(&d.name, &uid)?;
                let mounted = kcsi::is_mount_point(&path).unwrap_or(false);
                out.push(Publish {
                    pod_uid: uid,
                    path,
                    mounted,
                    error: None,
                });
            }
            out.sort_by(|a, b| a.pod_uid.cmp(&b.pod_uid));
            return Ok(out);
        }
        let volume_name = unique_volume_name(&self.side.name, &d.volume_handle);
        let mut out = Vec::new();
        for e in inventory::walk(self.host.files())?.published {
            if e.spec_name != d.name {
                continue;
            }
            let dir = e.data.dir();
            // The reconstructed spec must name this very volume; one that does not (or
            // cannot be rebuilt) is shown with why, and still counts as mounted.
            let rebuilt = construct_volume_spec(&self.host, &volume_name, dir);
            let error = match rebuilt {
                Ok(r) => {
                    let r = json!(r);
                    let csi = &r["spec"]["persistentVolume"]["spec"]["csi"];
                    let same = csi["driver"] == self.side.name.as_str()
                        && csi["volumeHandle"] == d.volume_handle.as_str();
                    (!same).then(|| format!("{} records another volume: {csi}", dir.display()))
                }
                Err(err) => Some(err.message().to_string()),
            };
            out.push(Publish {
                pod_uid: e.pod_uid.clone(),
                path: e.mount_path.clone(),
                mounted: e.mounted,
                error,
            });
        }
        Ok(out)
    }

    /// The path `Path`, `Get` and `List` report: the first caller's, "" when not mounted.
    fn mountpoint(&self, d: &Description) -> String {
        self.publishes(d)
            .ok()
            .and_then(|p| p.into_iter().next())
            .map(|p| p.path.display().to_string())
            .unwrap_or_default()
    }

    pub async fn create(&self, name: &str, opts: &BTreeMap<String, String>) -> Result<()> {
        check_name("volume name", name)?;
        let plan = options::parse(opts)?;
        let _lock = self.locks.lock(&self.store.path(name)).await;
        if let Some(existing) = self.store.load(name)? {
            if &existing.options == opts {
                return Ok(());
            }
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!(
                    "volume {name} already exists with other options ({:?})",
                    existing.options
                ),
            ));
        }
        let mut d = Description {
            name: name.to_string(),
            driver: self.side.name.clone(),
            // Stands in until CreateVolume answers, for the check below.
            volume_handle: plan
                .volume_handle
                .clone()
                .unwrap_or_else(|| "to-be-created".to_string()),
            created_by_kcsi: false,
            capacity_bytes: 0,
            fs_type: plan.fs_type,
            mount_options: plan.mount_options,
            block: plan.block,
            access_mode: plan.access_mode,
            secrets: plan.secrets,
            attributes: BTreeMap::new(),
            options: opts.clone(),
            created_at: k8s_openapi::jiff::Timestamp::now().to_string(),
        };
        // Refused before anything is created: a spec kcsi does not take, unreadable secrets.
        self.volume(&d, "check", BTreeMap::new())?;
        let secrets = self
            .secrets(&d)
            .map_err(|e| e.context(format!("volume {name}")))?;
        let (handle, created, capacity) = match (&plan.volume_handle, self.side.can_create) {
            (Some(h), _) => (h.clone(), false, 0),
            (None, true) => {
                let v = driver::create_volume(
                    &self.side.channel,
                    NewVolume {
                        name: format!("{}-{name}", self.name),
                        bytes: plan.size.unwrap_or(0),
                        block: d.block,
                        fs_type: d.fs_type.as_deref().unwrap_or(""),
                        mount_flags: d.mount_options.clone(),
                        access_mode: access_mode(&d.access_mode, &Default::default()),
                        parameters: plan.parameters.into_iter().collect(),
                        secrets: secrets.create_volume_secret,
                        topology: self.side.topology.clone(),
                    },
                    self.side.timeout,
                )
                .await
                .map_err(|e| e.context(format!("cannot create volume {name}")))?;
                d.attributes.extend(v.volume_context);
                (v.volume_id, true, v.capacity_bytes)
            }
            (None, false) => {
                return Err(Error::new(
                    ErrorKind::NotSupported,
                    format!(
                        "cannot create volume {name}: CSI driver {} has no Controller service; \
                         give -o volumeHandle=<id> of an existing volume",
                        self.side.name
                    ),
                ))
            }
        };
        d.attributes.extend(plan.attributes);
        d.volume_handle = handle;
        d.created_by_kcsi = created;
        d.capacity_bytes = capacity;
        if let Err(e) = self.store.save(&d) {
            if created {
                let _ = driver::delete_volume(
                    &self.side.channel,
                    &d.volume_handle,
                    secrets.delete_volume_secret,
                    self.side.timeout,
                )
                .await;
            }
            return Err(e);
        }
        Ok(())
    }

    /// Stages the volume unless staged, then publishes it for caller `id` unless published
    /// for it, and counts the call: the path.
    pub async fn mount(&self, name: &str, id: &str) -> Result<PathBuf> {
        check_name("volume name", name)?;
        let _lock = self.locks.lock(&self.store.path(name)).await;
        let d = self.described(name)?;
        let uid = pod_uid(id);
        let mut counts = self.store.load_counts(name)?;
        let publishes = self.publishes(&d)?;
        let held = publishes.iter().find(|p| p.pod_uid == uid && p.mounted);
        counts.mount(&uid, held.is_some());
        if let Some(p) = held {
            self.store.save_counts(name, &counts)?;
            return Ok(p.path.clone());
        }
        if d.access_mode == "ReadWriteOncePod" {
            if let Some(other) = publishes.iter().find(|p| p.pod_uid != uid) {
                return Err(Error::new(
                    ErrorKind::FailedPrecondition,
                    format!(
                        "volume {name} is ReadWriteOncePod and in use by caller {}",
                        other.pod_uid
                    ),
                ));
            }
        }
        let staged = self.staged(&d)?;
        let set_up = async {
            let context = if self.side.attach {
                self.attach(&d).await?
            } else {
                BTreeMap::new()
            };
            let v = self.volume(&d, &uid, context)?;
            if !staged {
                kubelet::stage(&self.host, &v).await?;
            }
            // Saved once published: a plugin killed in between leaves a publish without a
            // count, which counts as one Mount.
            let path = kubelet::publish(&self.host, &v).await?;
            self.store.save_counts(name, &counts)?;
            Ok::<PathBuf, Error>(path)
        };
        let failed = match set_up.await {
            Ok(path) => return Ok(path),
            Err(e) => e,
        };
        // Docker calls no Unmount after a failed Mount: undo what this call set up.
        let _ = kubelet::unpublish(&self.host, d.block, &d.name, &uid).await;
        self.remove_pod_dirs(&d, &uid);
        if !staged && publishes.is_empty() {
            let _ = self.unstage(&d).await;
            // Detached only once nothing is staged; else the next Unmount or start does it.
            if matches!(self.staged(&d), Ok(false)) {
                let _ = self.detach(&d).await;
            }
        }
        Err(failed)
    }

    async fn unstage(&self, d: &Description) -> Result<()> {
        kubelet::unstage(
            &self.host,
            d.block,
            &self.side.name,
            &d.volume_handle,
            &d.name,
        )
        .await
    }

    /// Counts an Unmount for caller `id`; the one that balances its Mount calls unpublishes
    /// the volume for it (nothing to do when it is not published for it), and the volume is
    /// unstaged after its last caller.
    pub async fn unmount(&self, name: &str, id: &str) -> Result<()> {
        check_name("volume name", name)?;
        let _lock = self.locks.lock(&self.store.path(name)).await;
        let d = self.described(name)?;
        let uid = pod_uid(id);
        let mut counts = self.store.load_counts(name)?;
        if !counts.unmount(&uid) {
            return self.store.save_counts(name, &counts);
        }
        if self.publishes(&d)?.iter().any(|p| p.pod_uid == uid) {
            kubelet::unpublish(&self.host, d.block, &d.name, &uid).await?;
            self.remove_pod_dirs(&d, &uid);
        }
        // Saved once unpublished: a count left by a kill in between is void, its publish gone.
        self.store.save_counts(name, &counts)?;
        if self.publishes(&d)?.is_empty() {
            if self.staged(&d)? {
                self.unstage(&d).await?;
            }
            self.detach(&d).await?;
        }
        Ok(())
    }

    /// The caller's directories the kubelet would remove with the pod; only empty ones go.
    fn remove_pod_dirs(&self, d: &Description, uid: &str) {
        let layout = self.host.layout();
        let first = if d.block {
            layout.pod_device_map_dir(uid)
        } else {
            layout
                .pod_volume_dir(uid, &d.name)
                .map(|p| p.parent().map(Path::to_path_buf).unwrap_or(p))
        };
        let (Ok(first), Ok(files)) = (first, self.host.files().open()) else {
            return;
        };
        let fs = files.beneath();
        let pods = layout.pods_dir();
        for dir in first.ancestors().take_while(|a| *a != pods.as_path()) {
            if fs.remove_dir(dir, "cannot remove a pod dir").is_err() {
                break;
            }
        }
    }

    /// Refused while mounted; else the volume is unstaged if an interrupted Mount left it
    /// staged, deleted when this plugin created it, and its description removed.
    pub async fn remove(&self, name: &str) -> Result<()> {
        check_name("volume name", name)?;
        let _lock = self.locks.lock(&self.store.path(name)).await;
        let d = self.described(name)?;
        let publishes = self.publishes(&d)?;
        if !publishes.is_empty() {
            let paths: Vec<String> = publishes
                .iter()
                .map(|p| p.path.display().to_string())
                .collect();
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "volume {name} is mounted for {} caller(s) ({}): unmount it first",
                    publishes.len(),
                    paths.join(", ")
                ),
            ));
        }
        if self.staged(&d)? {
            self.unstage(&d).await?;
        }
        self.detach(&d).await?;
        if d.created_by_kcsi {
            driver::delete_volume(
                &self.side.channel,
                &d.volume_handle,
                self.secrets(&d)?.delete_volume_secret,
                self.side.timeout,
            )
            .await
            .map_err(|e| e.context(format!("cannot remove volume {name}")))?;
        }
        self.store.remove(name)
    }

    pub fn path(&self, name: &str) -> Result<String> {
        Ok(self.mountpoint(&self.described(name)?))
    }

    /// `Get`'s volume: name, mountpoint, creation time and what kcsi knows of it.
    pub fn get(&self, name: &str) -> Result<Value> {
        let d = self.described(name)?;
        let publishes = self.publishes(&d)?;
        let counts = self.store.load_counts(name)?;
        let mounts: Vec<Value> = publishes
            .iter()
            .map(|p| {
                json!({
                    "podUID": p.pod_uid,
                    "path": p.path,
                    "mounted": p.mounted,
                    "mountCalls": counts.of(&p.pod_uid),
                    "error": p.error,
                })
            })
            .collect();
        let status = json!({
            "driver": d.driver,
            "volumeHandle": d.volume_handle,
            "createdByKcsi": d.created_by_kcsi,
            "capacityBytes": d.capacity_bytes,
            "block": d.block,
            "accessMode": d.access_mode,
            "attachment": self.store.load_attachment(name)?,
            "fsType": d.fs_type,
            "mountOptions": d.mount_options,
            "attributes": d.attributes,
            "staged": self.staged(&d)?,
            "mounts": mounts,
        });
        Ok(json!({
            "Name": d.name,
            "Mountpoint": self.mountpoint(&d),
            "CreatedAt": d.created_at,
            "Status": status,
        }))
    }

    /// Every volume with its mountpoint; a description that cannot be read is skipped (and
    /// logged): `Get` on it says why.
    pub fn list(&self) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        for name in self.store.names()? {
            match self.described(&name) {
                Ok(d) => out.push(json!({"Name": d.name, "Mountpoint": self.mountpoint(&d)})),
                Err(e) => eprintln!("kcsi volume-plugin: List skips volume {name}: {e}"),
            }
        }
        Ok(out)
    }

    /// What a restarted plugin finds on disk: each volume with its publishes, rebuilt from
    /// `vol_data.json`, and its callers' Mount calls.
    pub fn found(&self) -> Result<Vec<(String, Vec<Publish>, Counts)>> {
        let mut out = Vec::new();
        for name in self.store.names()? {
            if let Ok(d) = self.described(&name) {
                out.push((
                    name.clone(),
                    self.publishes(&d)?,
                    self.store.load_counts(&name)?,
                ));
            }
        }
        Ok(out)
    }
}
