//! A volume's life on the node in the kubelet's order and at its paths: filesystem and block,
//! repeats, read-only, each access mode, mount options, fsGroup and VOLUME_MOUNT_GROUP, the
//! SELinux context mount option, pod info, secrets.

use std::path::Path;

use serde_json::json;

use super::case::{check, fail, End, Outcome};
use super::ctx::{csi_mode, Ctx, VolumeWish, SECRETS};
use super::rpc;
use super::upstream;
use crate::probe;
use crate::steps;

/// Fails unless something is mounted at the target: with nothing there the runtime's bind
/// mount would put the pod's data on the node's own disk.
fn mounted_at(path: &Path) -> Result<(), End> {
    match kcsi::is_mount_point(path) {
        Ok(true) => Ok(()),
        Ok(false) => Err(check(
            format!(
                "NodePublishVolume answered OK, but nothing is mounted at {}: the pod would \
                 write to the node's own disk",
                path.display()
            ),
            upstream::SET_UP,
        )),
        Err(e) => Err(fail(upstream::SET_UP)(e)),
    }
}

pub async fn filesystem(c: &mut Ctx) -> Outcome {
    let v = c.volume(&VolumeWish::default()).await?;
    let path = c.set_up(&v).await?;
    mounted_at(&path)?;
    let io = probe::filesystem(&path, false).map_err(fail(upstream::SET_UP))?;
    c.tear_down(&v).await?;
    Ok(format!("published at {}; {io}", path.display()))
}

pub async fn block(c: &mut Ctx) -> Outcome {
    let wish = VolumeWish {
        block: true,
        ..Default::default()
    };
    let v = c.volume(&wish).await?;
    let path = c.set_up(&v).await?;
    let io = probe::block(&path, false).map_err(fail(upstream::MAP_POD_DEVICE))?;
    c.tear_down(&v).await?;
    Ok(io)
}

pub async fn idempotent(c: &mut Ctx) -> Outcome {
    let v = c.volume(&VolumeWish::default()).await?;
    let repeat = |e: End| e.blame(upstream::IDEMPOTENT, "the repeat: ");
    c.stage(&v).await?;
    c.stage(&v).await.map_err(repeat)?;
    let path = c.publish(&v).await?;
    c.publish(&v).await.map_err(repeat)?;
    mounted_at(&path)?;
    probe::filesystem(&path, false).map_err(fail(upstream::IDEMPOTENT))?;
    let staging = steps::staging_path(c.agent()?, &v).map_err(fail(upstream::MOUNT_DEVICE))?;
    c.unpublish(&v).await?;
    rpc::node_unpublish(&c.channel, &v.handle, &path, c.timeout)
        .await
        .map_err(fail(upstream::IDEMPOTENT))
        .map_err(repeat)?;
    c.unstage(&v).await?;
    let mut repeated = "NodeStageVolume, NodePublishVolume, NodeUnpublishVolume".to_string();
    if c.facts.node.stage_unstage {
        rpc::node_unstage(&c.channel, &v.handle, &staging, c.timeout)
            .await
            .map_err(fail(upstream::IDEMPOTENT))
            .map_err(repeat)?;
        repeated += ", NodeUnstageVolume";
    }
    c.nothing_mounted(upstream::IDEMPOTENT)?;
    Ok(format!("each answered OK twice: {repeated}"))
}

pub async fn read_only(c: &mut Ctx) -> Outcome {
    let wish = VolumeWish {
        read_only: true,
        ..Default::default()
    };
    let v = c.volume(&wish).await?;
    let path = c.set_up(&v).await?;
    mounted_at(&path)?;
    let io = probe::filesystem(&path, true).map_err(fail(upstream::READ_ONLY))?;
    c.tear_down(&v).await?;
    Ok(io)
}

/// One access mode: set up, the target used as the mode allows, torn down.
async fn access_mode(c: &mut Ctx, k8s: &'static str, writes: bool) -> Outcome {
    let wish = VolumeWish {
        access_mode: k8s,
        ..Default::default()
    };
    let mode = csi_mode(&c.facts, k8s);
    let v = c.volume(&wish).await?;
    let prefix = format!("{k8s} as {mode:?}: ");
    let ended = |e: End| e.blame(upstream::ACCESS_MODE, &prefix);
    let path = c.set_up(&v).await.map_err(ended)?;
    mounted_at(&path).map_err(ended)?;
    let io = if writes {
        probe::filesystem(&path, false).map_err(fail(upstream::ACCESS_MODE))?
    } else {
        std::fs::read_dir(&path)
            .map(|d| format!("listed {} entries", d.count()))
            .map_err(|e| {
                check(
                    format!("cannot list {}: {e}", path.display()),
                    upstream::ACCESS_MODE,
                )
            })?
    };
    c.tear_down(&v).await.map_err(ended)?;
    Ok(format!("sent as {mode:?}; {io}"))
}

pub async fn mode_rwo(c: &mut Ctx) -> Outcome {
    access_mode(c, "ReadWriteOnce", true).await
}

pub async fn mode_rox(c: &mut Ctx) -> Outcome {
    access_mode(c, "ReadOnlyMany", false).await
}

pub async fn mode_rwx(c: &mut Ctx) -> Outcome {
    access_mode(c, "ReadWriteMany", true).await
}

pub async fn mode_rwop(c: &mut Ctx) -> Outcome {
    access_mode(c, "ReadWriteOncePod", true).await
}

/// What the case sends when the run names no mount option the driver honours.
const MOUNT_OPTION: &str = "noatime";

pub async fn mount_options(c: &mut Ctx) -> Outcome {
    let required = c.mount_options.clone();
    let sent = if required.is_empty() {
        vec![MOUNT_OPTION.to_string()]
    } else {
        required.clone()
    };
    let wish = VolumeWish {
        mount_options: sent.clone(),
        ..Default::default()
    };
    let v = c.volume(&wish).await?;
    let prefix = format!("with mount_flags {sent:?}: ");
    let path = c
        .set_up(&v)
        .await
        .map_err(|e| e.blame(upstream::MOUNT_OPTIONS, &prefix))?;
    mounted_at(&path)?;
    probe::filesystem(&path, false).map_err(fail(upstream::MOUNT_OPTIONS))?;
    let options = mount_options_at(&path).map_err(|e| {
        check(
            format!("cannot read /proc/self/mountinfo: {e}"),
            upstream::MOUNT_OPTIONS,
        )
    })?;
    let missing: Vec<&String> = required
        .iter()
        .filter(|o| !options.split(',').any(|have| have == o.as_str()))
        .collect();
    if !missing.is_empty() {
        return Err(check(
            format!(
                "mount_flags {sent:?} were sent, but {} is mounted with {options} (missing \
                 {missing:?})",
                path.display()
            ),
            upstream::MOUNT_OPTIONS,
        ));
    }
    c.tear_down(&v).await?;
    Ok(if required.is_empty() {
        format!(
            "mount_flags {sent:?} accepted; the target is mounted with {options} (give \
             --mount-option to require options in effect)"
        )
    } else {
        format!("the target is mounted with {options}")
    })
}

/// The per-mount options of the topmost mount at `path`, from /proc/self/mountinfo.
fn mount_options_at(path: &Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    let want = path.display().to_string();
    text.lines()
        .rev()
        .find_map(|line| {
            let mut f = line.split(' ');
            let point = f.nth(4)?;
            let options = f.next()?;
            (unescape(point) == want).then(|| options.to_string())
        })
        .ok_or_else(|| std::io::Error::other(format!("{want} is not in it")))
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

const FS_GROUP: u32 = 4321;

pub async fn fs_group(c: &mut Ctx) -> Outcome {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if c.facts.node.volume_mount_group {
        return Err(End::Skip(
            "the driver has Node VOLUME_MOUNT_GROUP, so the kubelet leaves the fsGroup to it \
             and does not chown (volume.mount-group checks that)"
                .into(),
        ));
    }
    let breaks = upstream::FS_GROUP;
    c.csidriver(json!({"fsGroupPolicy": "File"}));
    let wish = VolumeWish {
        fs_group: Some(FS_GROUP.into()),
        ..Default::default()
    };
    let v = c.volume(&wish).await?;
    let path = c.set_up(&v).await?;
    mounted_at(&path)?;
    let (root, new) = group_of_new_file(&path, breaks)?;
    let setgid = root.permissions().mode() & 0o2000 != 0;
    if root.gid() != FS_GROUP || new.gid() != FS_GROUP || !setgid {
        return Err(check(
            format!(
                "with fsGroup {FS_GROUP} the volume root has gid {} (setgid {setgid}) and a new \
                 file gid {}",
                root.gid(),
                new.gid()
            ),
            breaks,
        ));
    }
    c.tear_down(&v).await?;
    Ok(format!(
        "root and a new file have gid {FS_GROUP}, the root setgid (the kubelet's chown, which \
         the filesystem kept)"
    ))
}

/// The metadata of the volume root at `path` and of a file written there (then removed).
fn group_of_new_file(
    path: &Path,
    breaks: &'static str,
) -> Result<(std::fs::Metadata, std::fs::Metadata), End> {
    let file = path.join("kcsi-conformance-fsgroup");
    std::fs::write(&file, b"fsGroup")
        .map_err(|e| check(format!("cannot write {}: {e}", file.display()), breaks))?;
    let meta = |p: &Path| {
        std::fs::metadata(p).map_err(|e| check(format!("cannot stat {}: {e}", p.display()), breaks))
    };
    let got = meta(path).and_then(|root| Ok((root, meta(&file)?)));
    let _ = std::fs::remove_file(&file);
    got
}

/// The calls that carry a filesystem volume's capability: NodeStageVolume (with
/// STAGE_UNSTAGE_VOLUME) and NodePublishVolume.
fn capability_calls(c: &Ctx) -> Vec<&'static str> {
    if c.facts.node.stage_unstage {
        vec!["NodeStageVolume", "NodePublishVolume"]
    } else {
        vec!["NodePublishVolume"]
    }
}

/// Fails unless a request of each of `calls` that this case's proxy saw contains `text`.
fn each_carried(
    c: &Ctx,
    calls: &[&str],
    text: &str,
    what: &str,
    breaks: &'static str,
) -> Result<(), End> {
    for call in calls {
        let requests = c.requests(call);
        if !requests.iter().any(|r| r.contains(text)) {
            return Err(check(
                format!("no {call} carried {what}: {requests:?}"),
                breaks,
            ));
        }
    }
    Ok(())
}

pub async fn mount_group(c: &mut Ctx) -> Outcome {
    use std::os::unix::fs::MetadataExt;
    if !c.facts.node.volume_mount_group {
        return Err(End::Skip(
            "the driver has no Node VOLUME_MOUNT_GROUP (the kubelet applies the fsGroup itself: \
             volume.fs-group)"
                .into(),
        ));
    }
    let breaks = upstream::MOUNT_GROUP;
    c.csidriver(json!({"fsGroupPolicy": "File"}));
    let wish = VolumeWish {
        fs_group: Some(FS_GROUP.into()),
        ..Default::default()
    };
    let v = c.volume(&wish).await?;
    let sent = format!("volume_mount_group \"{FS_GROUP}\"");
    let path = c
        .set_up(&v)
        .await
        .map_err(|e| e.blame(breaks, &format!("with {sent}: ")))?;
    let calls = capability_calls(c);
    // As the request's text shows the field.
    let field = format!("volume_mount_group: \"{FS_GROUP}\"");
    each_carried(c, &calls, &field, &sent, breaks)?;
    let group = match kcsi::is_mount_point(&path) {
        Ok(true) => {
            let (root, new) = group_of_new_file(&path, breaks)?;
            if root.gid() != FS_GROUP || new.gid() != FS_GROUP {
                return Err(check(
                    format!(
                        "NodePublishVolume with {sent} answered OK, but the volume root has gid \
                         {} and a new file gid {}: the kubelet does not chown a volume of a \
                         driver with VOLUME_MOUNT_GROUP",
                        root.gid(),
                        new.gid()
                    ),
                    breaks,
                ));
            }
            format!("the root and a new file have gid {FS_GROUP}")
        }
        Ok(false) => format!(
            "nothing is mounted at {}, so the group of files in the volume was not checked",
            path.display()
        ),
        Err(e) => return Err(fail(breaks)(e)),
    };
    c.tear_down(&v).await?;
    Ok(format!(
        "{} carried {sent} and answered OK; {group}",
        calls.join(" and ")
    ))
}

/// The pod's SELinux file label volume.selinux-mount mounts with: the kubelet's translation
/// of a pod's seLinuxOptions level s0:c123,c456 (pkg/volume/util/selinux.go
/// SELinuxOptionsToFileLabel).
pub const SELINUX_LABEL: &str = "system_u:object_r:container_file_t:s0:c123,c456";

pub async fn selinux_mount(c: &mut Ctx) -> Outcome {
    if !c.selinux_mount {
        return Err(End::Skip(
            "the run does not say that the driver's CSIDriver sets seLinuxMount: true (give \
             --selinux-mount)"
                .into(),
        ));
    }
    let breaks = upstream::SELINUX_MOUNT;
    c.csidriver(json!({"seLinuxMount": true}));
    let wish = VolumeWish {
        access_mode: "ReadWriteOncePod",
        se_linux_label: Some(SELINUX_LABEL.into()),
        ..Default::default()
    };
    let v = c.volume(&wish).await?;
    // The option as the kubelet formats it (context=%q), and as the request's text shows it.
    let flag = format!("context={SELINUX_LABEL:?}");
    let shown = format!("{flag:?}");
    let path = c
        .set_up(&v)
        .await
        .map_err(|e| e.blame(breaks, &format!("with mount_flags [{shown}]: ")))?;
    let calls = capability_calls(c);
    each_carried(c, &calls, &shown, &format!("the mount flag {flag}"), breaks)?;
    let label = if !Path::new(SELINUXFS).exists() {
        format!(
            "this host has no SELinux ({SELINUXFS} is missing), so the label in effect was not \
             checked"
        )
    } else {
        match kcsi::is_mount_point(&path) {
            Ok(true) => {
                let have = selinux_label_of(&path).map_err(|e| {
                    check(
                        format!("cannot read the SELinux label of {}: {e}", path.display()),
                        breaks,
                    )
                })?;
                if have != SELINUX_LABEL {
                    return Err(check(
                        format!(
                            "NodePublishVolume with {flag} answered OK, but {} is labelled \
                             {have:?}: the container runtime does not relabel a volume the \
                             kubelet mounted with the context option",
                            path.display()
                        ),
                        breaks,
                    ));
                }
                format!("the target is labelled {SELINUX_LABEL}")
            }
            Ok(false) => format!(
                "nothing is mounted at {}, so the label in effect was not checked",
                path.display()
            ),
            Err(e) => return Err(fail(breaks)(e)),
        }
    };
    c.tear_down(&v).await?;
    Ok(format!(
        "a ReadWriteOncePod volume: {} carried {flag} and answered OK; {label}",
        calls.join(" and ")
    ))
}

/// Where the kernel's SELinux filesystem is mounted when SELinux is on.
const SELINUXFS: &str = "/sys/fs/selinux";

/// The security.selinux attribute of `path`.
fn selinux_label_of(path: &Path) -> std::io::Result<String> {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    let mut buf = [0u8; 1024];
    // SAFETY: getxattr on NUL-terminated strings, into a buffer of the length given.
    let n = unsafe {
        libc::getxattr(
            p.as_ptr(),
            c"security.selinux".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let text = String::from_utf8_lossy(&buf[..n as usize]);
    Ok(text.trim_end_matches('\0').to_string())
}

pub async fn pod_info(c: &mut Ctx) -> Outcome {
    c.csidriver(json!({"podInfoOnMount": true}));
    let v = c.volume(&VolumeWish::default()).await?;
    let path = c
        .set_up(&v)
        .await
        .map_err(|e| e.blame(upstream::POD_INFO, ""))?;
    mounted_at(&path)?;
    let io = probe::filesystem(&path, false).map_err(fail(upstream::POD_INFO))?;
    c.tear_down(&v).await?;
    Ok(io)
}

pub async fn secrets(c: &mut Ctx) -> Outcome {
    let breaks = upstream::SECRETS;
    let wish = VolumeWish {
        secrets: true,
        ..Default::default()
    };
    let v = c.volume(&wish).await?;
    let path = c
        .set_up(&v)
        .await
        .map_err(|e| e.blame(breaks, "with stage and publish secrets: "))?;
    mounted_at(&path)?;
    let io = probe::filesystem(&path, false).map_err(fail(breaks))?;
    let mut carried = Vec::new();
    let (attaches, stages) = (c.facts.publish_unpublish, c.facts.node.stage_unstage);
    for (call, key, value) in SECRETS {
        let sent = match *call {
            "ControllerPublishVolume" => attaches,
            "NodeStageVolume" => stages,
            _ => true,
        };
        if !sent {
            continue;
        }
        let requests = c.requests(call);
        // The report shows these texts: each must name the key and hide the value.
        if requests.iter().any(|r| r.contains(value)) {
            return Err(check(
                format!("the suite's record of {call} shows the value of secret {key:?}"),
                breaks,
            ));
        }
        if !requests
            .iter()
            .any(|r| r.contains(&format!("{key:?}: \"<redacted>\"")))
        {
            return Err(check(
                format!("no {call} carried secret {key:?}: {requests:?}"),
                breaks,
            ));
        }
        carried.push(format!("{call} {key:?}"));
    }
    c.tear_down(&v).await?;
    Ok(format!("secrets carried by {}; {io}", carried.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::unescape;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/a\040b/c\134d"), "/a b/c\\d");
        assert_eq!(unescape(r"/plain\04"), r"/plain\04");
    }
}
