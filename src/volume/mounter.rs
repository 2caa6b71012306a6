//! Mounter and unmounter (upstream `csiMountMgr`): publish a volume into a pod's volume dir with
//! NodePublishVolume, record `vol_data.json` beside it, and undo both with NodeUnpublishVolume.
//!
//! Differs from upstream on purpose: every SetUp fetches the publish context afresh (upstream's
//! cached one leaves a repeated SetUp without it); capabilities come from the client's
//! per-connection cache instead of one probe per step; the SELinux relabel probe
//! (`GetSELinuxSupport`) is left to the caller (the Go volumeplugin does it with the kubelet's
//! host utils);
//! `serviceAccountTokenInSecrets` is honoured as the CSIDriver says, without a kubelet gate.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::TokenRequestStatus;
use k8s_openapi::api::core::v1::{Pod, SecretReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use crate::csi::proto::csi::NodePublishVolumeRequest;
use crate::csi::proto::TOKENS_KEY;
use crate::disk::files::OpenFiles;
use crate::disk::paths::{attachment_name, ephemeral_volume_handle};
use crate::disk::volume_data::{self, keys, VolumeData};
use crate::error::{Error, ErrorClass, ErrorKind, Result};
use crate::goquote::quote;
use crate::host::Host;
use crate::spec::{LifecycleMode, Source, VolumeSpec};
use crate::volume::capability::volume_capability;
use crate::volume::driver_facts::{DriverFacts, DEFAULT_TOKEN_EXPIRATION_SECONDS};
use crate::volume::fs_group::{self, ChangePolicy};
use crate::volume::metrics::{self, VolumeMetrics};
use crate::volume::operation::{pod_info_attributes, with_dir_sync, Operation};

/// `kcsi_mounter_set_up`'s `args_json` (upstream `MounterArgs`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MounterArgs {
    pub fs_group: Option<i64>,
    pub fs_group_change_policy: Option<ChangePolicy>,
    pub se_linux_label: Option<String>,
    /// The kubelet reconstructed the volume after a restart: a failed publish must not
    /// remove the directory the pod may still use (upstream `SetUpAt`, #121271).
    #[serde(default)]
    pub reconstructed_volume: bool,
    /// A periodic re-publish (`requiresRepublish`) of a volume the pod already uses.
    #[serde(default)]
    pub is_remount: bool,
}

/// One volume of one pod, ready to be published. Creating it does no I/O and needs no
/// registered driver.
pub struct Mounter {
    spec: VolumeSpec,
    pod: Pod,
    pod_uid: String,
    driver: String,
    volume_handle: String,
    read_only: bool,
    mode: LifecycleMode,
    /// The NodePublish target: `<root>/pods/<uid>/volumes/kubernetes.io~csi/<spec>/mount`.
    path: PathBuf,
}

/// Everything NodePublishVolume needs but the capabilities.
struct Publication {
    fs_type: String,
    attributes: HashMap<String, String>,
    secret_ref: Option<SecretReference>,
    access_mode: String,
    mount_options: Vec<String>,
    staging_path: Option<PathBuf>,
    publish_context: Option<HashMap<String, String>>,
}

impl Mounter {
    /// Upstream `NewMounter`: an inline volume gets the handle `csi-<sha256(podUID+spec)>` and
    /// its own read-only flag; a PV its handle and the spec's read-only flag.
    pub fn new(host: &Host, spec: VolumeSpec, pod: Pod) -> Result<Mounter> {
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
        let path = host.layout().pod_mount_path(&pod_uid, spec.name())?;
        let (driver, volume_handle, read_only) = match spec.source()? {
            Source::Inline(s) => (
                s.driver.clone(),
                ephemeral_volume_handle(&pod_uid, spec.name()),
                s.read_only.unwrap_or(false),
            ),
            Source::Persistent(s) => (s.driver.clone(), s.volume_handle.clone(), spec.read_only),
        };
        let mode = spec.lifecycle_mode()?;
        Ok(Mounter {
            spec,
            pod,
            pod_uid,
            driver,
            volume_handle,
            read_only,
            mode,
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Upstream `pkg/volume/csi/csi_mounter.go SetUpAt`, step for step, with its error classes.
    pub async fn set_up(&self, host: &Host, args: &MounterArgs) -> Result<()> {
        let _volume = host.volume_locks().lock(self.dir()).await;
        let (driver, volume, pod) = (&self.driver, &self.volume_handle, &self.pod_uid);
        tracing::debug!(
            driver,
            volume,
            pod,
            "{}",
            csi_log!("Mounter.SetUpAt({})", self.path.display())
        );
        let op = Operation::start(
            host,
            &self.driver,
            &csi_log!("mounter.SetUpAt failed to get CSI client"),
        )?
        .migrated(self.spec.migrated);
        // A lookup failure surfaces in upstream's first CSIDriver check (lifecycle mode); the
        // only other failure, an invalid fsGroupPolicy, in its fsGroup policy check.
        let facts = host.driver_facts(&self.driver).map_err(|e| {
            let step = if e.kind() == ErrorKind::InvalidArgument {
                "check fsGroup policy"
            } else {
                "check volume lifecycle mode"
            };
            e.context(csi_log!("mounter.SetupAt failed to {step}"))
                .transient()
        })?;
        facts.check_lifecycle_mode(self.mode).map_err(|e| {
            e.with_kind(ErrorKind::NotSupported)
                .context(csi_log!(
                    "mounter.SetupAt failed to check volume lifecycle mode"
                ))
                .transient()
        })?;
        // kcsi probes capabilities once per driver connection; upstream probes STAGE_UNSTAGE
        // (final on failure, PV only) and VOLUME_MOUNT_GROUP (transient) separately.
        let caps = op.capabilities().await.map_err(|e| match self.mode {
            LifecycleMode::Persistent => e
                .context(csi_log!("mounter.SetUpAt failed to check for STAGE_UNSTAGE_VOLUME capability"))
                .with_class(ErrorClass::Final),
            LifecycleMode::Ephemeral => e
                .context(csi_log!(
                    "mounter.SetUpAt failed to determine if the node service has VOLUME_MOUNT_GROUP capability"
                ))
                .transient(),
        })?;
        let mut p = self.publication(host, &op, caps.stage_unstage).await?;

        let label = args.se_linux_label.as_deref().unwrap_or("");
        let selinux_mount = host.config().gate("SELinuxMountReadWriteOncePod")
            && facts.se_linux_mount
            && !label.is_empty();
        let data = self.volume_data(host, selinux_mount.then_some(label));

        let dir = self.dir();
        let files = host.files().open()?;
        let fs = files.beneath();
        let (made, staged) = files.make_dirs_and_stage(dir, &data).await;
        made.map_err(|e| e.prefix(csi_log!("mounter.SetUpAt ")))?;
        fs.check_no_symlink(&self.path, &csi_log!("mounter.SetUpAt"))?;
        let mut secrets = op
            .secrets(&self.spec, "NodePublishSecretRef", p.secret_ref.as_ref())
            .await?;
        if facts.pod_info_on_mount {
            p.attributes
                .extend(pod_info_attributes(&self.pod, &self.pod_uid, self.mode));
        }
        if !facts.token_requests.is_empty() {
            let tokens = self.token_attrs(host, &facts).await.map_err(|e| {
                e.context(csi_log!(
                    "mounter.SetUpAt failed to get service accoount token attributes"
                ))
                .transient()
            })?;
            if facts.service_account_token_in_secrets {
                secrets.insert(TOKENS_KEY.to_string(), tokens);
            } else {
                p.attributes.insert(TOKENS_KEY.to_string(), tokens);
            }
        }
        let mount_group = if caps.volume_mount_group {
            args.fs_group
        } else {
            None
        };
        if selinux_mount {
            p.mount_options.push(format!("context={}", quote(label)));
        }

        let synced = match staged.and_then(|s| files.place(s)) {
            Ok(sync) => sync,
            Err(e) => {
                // Final, as upstream's SetUpAt returns the save error itself.
                self.clean_up(&files);
                return Err(e
                    .context(csi_log!("mounter.SetUpAt failed to save volume info data"))
                    .with_class(ErrorClass::Final));
            }
        };

        let req = NodePublishVolumeRequest {
            volume_id: self.volume_handle.clone(),
            publish_context: p.publish_context.unwrap_or_default(),
            staging_target_path: p
                .staging_path
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            target_path: self.path.to_string_lossy().into_owned(),
            volume_capability: Some(volume_capability(
                &p.access_mode,
                &caps,
                &p.fs_type,
                p.mount_options,
                mount_group,
            )),
            readonly: self.read_only,
            secrets,
            volume_context: p.attributes,
        };
        // The driver resolves the target itself: a symlink swapped in since must not lead it out.
        fs.check_no_symlink(&self.path, &csi_log!("mounter.SetUpAt"))?;
        let client = op.client();
        if let Err(e) = with_dir_sync(synced, client.node_publish(req, op.deadline)).await {
            if e.class() == ErrorClass::Final && !args.reconstructed_volume && !args.is_remount {
                self.clean_up(&files);
            }
            return Err(e);
        }

        if !caps.volume_mount_group
            && fs_group::supports_fs_group(
                &self.spec,
                &p.fs_type,
                args.fs_group,
                facts.fs_group_policy,
                self.read_only,
            )
        {
            let gid = args.fs_group.unwrap_or_default();
            let policy = args.fs_group_change_policy.unwrap_or_default();
            // The walk changes owners and modes: never through a symlink swapped in since.
            fs.check_no_symlink(&self.path, &csi_log!("applyFSGroup"))
                .map_err(Error::uncertain)?;
            // A walk of a big volume must not hold up a runtime worker.
            let path = self.path.clone();
            let walk = tokio::task::spawn_blocking(move || {
                fs_group::set_volume_ownership(&path, gid, policy)
            });
            let result = walk
                .await
                .unwrap_or_else(|e| Err(Error::internal(format!("fsGroup change panicked: {e}"))));
            result.map_err(|e| {
                e.context(csi_log!(
                    "applyFSGroup failed for vol {}",
                    self.volume_handle
                ))
                .uncertain()
            })?;
        }
        tracing::debug!(
            driver,
            volume,
            pod,
            "{}",
            csi_log!(
                "mounter.SetUp successfully requested NodePublish [{}]",
                self.path.display()
            )
        );
        Ok(())
    }

    /// The per-source part of SetUpAt (upstream step 6).
    async fn publication(
        &self,
        host: &Host,
        op: &Operation<'_>,
        stage_unstage: bool,
    ) -> Result<Publication> {
        Ok(match self.spec.source()? {
            Source::Inline(s) => Publication {
                fs_type: s.fs_type.clone().unwrap_or_default(),
                attributes: s
                    .volume_attributes
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
                secret_ref: s.node_publish_secret_ref.as_ref().map(|r| SecretReference {
                    name: Some(r.name.clone()),
                    namespace: self.pod.metadata.namespace.clone(),
                }),
                access_mode: "ReadWriteOnce".to_string(),
                mount_options: Vec::new(),
                staging_path: None,
                publish_context: None,
            },
            Source::Persistent(s) => {
                let staging_path = if stage_unstage {
                    Some(
                        host.layout()
                            .device_mount_path(&s.driver, &s.volume_handle)
                            .map_err(|e| {
                                e.context(csi_log!(
                                    "mounter.SetUpAt failed to make device mount path"
                                ))
                            })?,
                    )
                } else {
                    None
                };
                let publish_context = op
                    .publish_context(&self.spec, &s.volume_handle)
                    .await
                    .map_err(|e| {
                        e.context(csi_log!("mounter.SetUpAt failed to fetch publishContext"))
                    })?;
                Publication {
                    fs_type: s.fs_type.clone().unwrap_or_default(),
                    attributes: s
                        .volume_attributes
                        .clone()
                        .unwrap_or_default()
                        .into_iter()
                        .collect(),
                    secret_ref: s.node_publish_secret_ref.clone(),
                    access_mode: self
                        .spec
                        .access_modes()
                        .first()
                        .cloned()
                        .unwrap_or_else(|| "ReadWriteOnce".to_string()),
                    mount_options: self.spec.mount_options().to_vec(),
                    staging_path,
                    publish_context,
                }
            }
        })
    }

    /// The per-volume dir holding `mount` and `vol_data.json`.
    fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(&self.path)
    }

    /// Upstream `removeMountDir` after a failed SetUp: leaves a mounted target alone.
    fn clean_up(&self, files: &OpenFiles) {
        if let Err(e) = files.remove_mount_dir(&self.path) {
            tracing::error!(
                "{}",
                csi_log!(
                    "mounter.SetUpAt failed to remove mount dir after error [{}]: {e}",
                    self.path.display()
                )
            );
        }
    }

    fn volume_data(&self, host: &Host, selinux_context: Option<&str>) -> VolumeData {
        let node = &host.config().node_name;
        let mut data: VolumeData = [
            (keys::SPEC_VOL_ID, self.spec.name()),
            (keys::VOLUME_HANDLE, &self.volume_handle),
            (keys::DRIVER_NAME, &self.driver),
            (keys::NODE_NAME, node),
            (keys::LIFECYCLE_MODE, self.mode.as_str()),
            (
                keys::ATTACHMENT_ID,
                &attachment_name(&self.volume_handle, &self.driver, node),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        if let Some(label) = selinux_context {
            data.insert(keys::SELINUX_MOUNT_CONTEXT.to_string(), label.to_string());
        }
        data
    }

    /// Upstream `podServiceAccountTokenAttrs`: one token per CSIDriver `tokenRequests` entry.
    async fn token_attrs(&self, host: &Host, facts: &DriverFacts) -> Result<String> {
        let mut tokens = BTreeMap::new();
        for request in &facts.token_requests {
            // An empty audience asks for the API server's default audiences.
            let audiences = if request.audience.is_empty() {
                Vec::new()
            } else {
                vec![request.audience.clone()]
            };
            let expiration = request
                .expiration_seconds
                .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS);
            let status = host
                .service_account_token(&self.pod, audiences, expiration)
                .await?;
            tokens.insert(request.audience.clone(), status);
        }
        Ok(tokens_json(&tokens))
    }

    /// NodeGetVolumeStats on the mount path.
    pub async fn metrics(&self, host: &Host) -> Result<VolumeMetrics> {
        metrics::volume_stats(host, &self.driver, &self.volume_handle, &self.path).await
    }
}

/// Go's JSON of `map[audience]authenticationv1.TokenRequestStatus`: sorted audiences, fields
/// in struct order.
pub fn tokens_json(tokens: &BTreeMap<String, TokenRequestStatus>) -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Status<'a> {
        token: &'a str,
        expiration_timestamp: Option<&'a Time>,
    }
    let out: BTreeMap<&str, Status> = tokens
        .iter()
        .map(|(aud, s)| {
            let status = Status {
                token: s.token.as_deref().unwrap_or(""),
                expiration_timestamp: s.expiration_timestamp.as_ref(),
            };
            (aud.as_str(), status)
        })
        .collect();
    serde_json::to_string(&out).unwrap_or_else(|_| "{}".to_string())
}

/// A published volume to tear down, known from its `vol_data.json` (so a restarted kubelet can
/// unmount what an earlier one mounted).
pub struct Unmounter {
    /// Driver and handle from `vol_data.json`; `None` when an interrupted set-up or teardown
    /// left only kcsi's leftovers (no file, nothing mounted), which teardown just removes.
    volume: Option<(String, String)>,
    path: PathBuf,
}

impl Unmounter {
    /// Upstream `NewUnmounter`: loads `<pod volume dir>/vol_data.json`.
    pub fn new(host: &Host, spec_name: &str, pod_uid: &str) -> Result<Unmounter> {
        let path = host.layout().pod_mount_path(pod_uid, spec_name)?;
        let dir = path.parent().unwrap_or(&path);
        let load = || -> Result<Option<(String, String)>> {
            let files = host.files().open()?;
            let data = match files.load(dir) {
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    return if files.only_leftovers(dir, None)? {
                        Ok(None)
                    } else {
                        Err(e)
                    };
                }
                other => other?,
            };
            let driver = volume_data::get(&data, keys::DRIVER_NAME, dir)?.to_string();
            let handle = volume_data::get(&data, keys::VOLUME_HANDLE, dir)?.to_string();
            Ok(Some((driver, handle)))
        };
        let volume = load().map_err(|e| {
            e.context(csi_log!(
                "unmounter failed to load volume data file [{}]",
                path.display()
            ))
        })?;
        Ok(Unmounter { volume, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Upstream `TearDownAt`: NodeUnpublishVolume, then remove the dir and `vol_data.json`
    /// unless the target is still mounted. A failed unpublish is final.
    pub async fn tear_down(&self, host: &Host) -> Result<()> {
        let dir = self.path.parent().unwrap_or(&self.path);
        let _volume = host.volume_locks().lock(dir).await;
        let clean = || -> Result<()> {
            host.files()
                .open()?
                .remove_mount_dir(&self.path)
                .map_err(|e| {
                    e.context(csi_log!(
                        "Unmounter.TearDownAt failed to clean mount dir [{}]",
                        self.path.display()
                    ))
                })
        };
        let Some((driver, volume_handle)) = &self.volume else {
            if !host.files().open()?.only_leftovers(dir, None)? {
                return Err(Error::new(
                    ErrorKind::FailedPrecondition,
                    csi_log!(
                        "Unmounter.TearDownAt: {} was set up again since this unmounter was made; make a new one",
                        dir.display()
                    ),
                ));
            }
            tracing::info!(
                "{}",
                csi_log!(
                    "Unmounter.TearDownAt found no volume data file, only leftovers of an interrupted operation in {}: removing them",
                    dir.display()
                )
            );
            return clean();
        };
        let (driver, volume) = (driver.as_str(), volume_handle.as_str());
        tracing::debug!(
            driver,
            volume,
            "{}",
            csi_log!("Unmounter.TearDownAt({})", self.path.display())
        );
        let op = Operation::start(
            host,
            driver,
            &csi_log!("Unmounter.TearDownAt failed to get CSI client"),
        )?;
        host.files()
            .open()?
            .beneath()
            .check_no_symlink(&self.path, &csi_log!("Unmounter.TearDownAt"))?;
        let target = self.path.to_string_lossy();
        op.client()
            .node_unpublish(volume_handle, &target, op.deadline)
            .await
            .map_err(|e| {
                e.context(csi_log!("Unmounter.TearDownAt failed"))
                    .with_class(ErrorClass::Final)
            })?;
        clean()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn token_attrs_have_upstream_shape() {
        let status = |t: &str| TokenRequestStatus {
            token: Some(t.to_string()),
            expiration_timestamp: Some(Time(Timestamp::from_second(1).unwrap())),
        };
        let tokens = BTreeMap::from([(
            "".to_string(),
            status("test-ns:test-service-account:3600:[api]"),
        )]);
        assert_eq!(
            tokens_json(&tokens),
            r#"{"":{"token":"test-ns:test-service-account:3600:[api]","expirationTimestamp":"1970-01-01T00:00:01Z"}}"#
        );
        let tokens = BTreeMap::from([
            ("gcp".to_string(), status("t2")),
            ("aws".to_string(), status("t1")),
        ]);
        assert_eq!(
            tokens_json(&tokens),
            r#"{"aws":{"token":"t1","expirationTimestamp":"1970-01-01T00:00:01Z"},"gcp":{"token":"t2","expirationTimestamp":"1970-01-01T00:00:01Z"}}"#
        );
    }

    #[test]
    fn mounter_args_reject_unknown_keys() {
        let a: MounterArgs = serde_json::from_str(
            r#"{"fsGroup":3000,"fsGroupChangePolicy":"OnRootMismatch","seLinuxLabel":"s0"}"#,
        )
        .unwrap();
        assert_eq!(
            (a.fs_group, a.fs_group_change_policy),
            (Some(3000), Some(ChangePolicy::OnRootMismatch))
        );
        assert!(serde_json::from_str::<MounterArgs>(r#"{"fsUser":1}"#).is_err());
        assert!(
            serde_json::from_str::<MounterArgs>(r#"{"fsGroupChangePolicy":"Sometimes"}"#).is_err()
        );
    }
}
