//! The case table: each case's name, what it checks, the kubelet behaviour it stands for, and
//! the function that runs it. Cases pass with a note, fail with a [`Failure`], or are skipped
//! with the capability that made them not apply.

use std::future::Future;
use std::pin::Pin;

use super::ctx::Ctx;
use super::{attach, crash, registration, stats, volume};

/// Why a case did not pass.
pub enum End {
    Fail(Failure),
    Skip(String),
}

/// A failed check: what went wrong, and which kubelet behaviour that breaks (upstream file and
/// function). The runner adds the RPC that went wrong (request and answer).
pub struct Failure {
    pub what: String,
    pub breaks: &'static str,
    /// No answer reached the kubelet: the connection broke (Unavailable, no driver status).
    pub unanswered: bool,
}

impl End {
    /// The same failure, put down to `breaks` with `prefix` before what went wrong.
    pub fn blame(self, breaks: &'static str, prefix: &str) -> End {
        match self {
            End::Fail(f) => End::Fail(Failure {
                what: format!("{prefix}{}", f.what),
                breaks,
                unanswered: f.unanswered,
            }),
            skip => skip,
        }
    }
}

impl From<Failure> for End {
    fn from(f: Failure) -> End {
        End::Fail(f)
    }
}

/// `Ok(note)`: passed.
pub type Outcome = Result<String, End>;

pub type Run = for<'a> fn(&'a mut Ctx) -> Pin<Box<dyn Future<Output = Outcome> + 'a>>;

pub struct Case {
    pub name: &'static str,
    pub checks: &'static str,
    /// Faults of this case's own proxy (the crash cases), in `kcsi fault-proxy` syntax.
    pub faults: &'static [&'static str],
    /// This case's calls get a short deadline (the crash cases wait for one to pass).
    pub short_deadline: bool,
    pub run: Run,
}

/// A failure of the step the kubelet behaviour `breaks` depends on.
pub fn fail(breaks: &'static str) -> impl FnOnce(kcsi::Error) -> End {
    move |e| {
        End::Fail(Failure {
            unanswered: e.kind() == kcsi::ErrorKind::Unavailable && e.grpc_code().is_none(),
            what: e.message().to_string(),
            breaks,
        })
    }
}

/// A failed check that is not an error of a call.
pub fn check(what: impl Into<String>, breaks: &'static str) -> End {
    End::Fail(Failure {
        what: what.into(),
        breaks,
        unanswered: false,
    })
}

macro_rules! case {
    ($name:literal, $f:path, $checks:literal) => {
        case!($name, $f, $checks, [], false)
    };
    ($name:literal, $f:path, $checks:literal, [$($fault:literal),*], $short:literal) => {
        Case {
            name: $name,
            checks: $checks,
            faults: &[$($fault),*],
            short_deadline: $short,
            run: {
                fn run(c: &mut Ctx) -> Pin<Box<dyn Future<Output = Outcome> + '_>> {
                    Box::pin($f(c))
                }
                run
            },
        }
    };
}

/// Every case, in the order they run.
pub const CASES: &[Case] = &[
    case!(
        "registration.plugin-info",
        registration::plugin_info,
        "GetPluginInfo answers a name the kubelet's ValidatePlugin accepts with \
         node-driver-registrar's versions (1.0.0), and a vendor_version"
    ),
    case!(
        "registration.node-info",
        registration::node_info,
        "RegisterPlugin's NodeGetInfo answers a node ID the kubelet accepts, the same one again \
         on a re-registration (a kubelet or registrar restart), and max_volumes_per_node >= 0"
    ),
    case!(
        "registration.node-capabilities",
        registration::node_capabilities,
        "NodeGetCapabilities answers the same capabilities on every call (the kubelet asks \
         before each stage, publish, stats and expand)"
    ),
    case!(
        "volume.filesystem",
        volume::filesystem,
        "a filesystem volume through MountDevice, SetUp, TearDown and UnmountDevice at the \
         kubelet's paths: something is mounted at the target, a file written there reads back, \
         and nothing stays mounted after"
    ),
    case!(
        "volume.block",
        volume::block,
        "a raw block volume through SetUpDevice, MapPodDevice, UnmapPodDevice and \
         TearDownDevice: the publish path is a block device bytes go through, nothing stays \
         mounted after"
    ),
    case!(
        "volume.idempotent",
        volume::idempotent,
        "NodeStageVolume and NodePublishVolume repeated with the same arguments answer OK, and \
         so do NodeUnpublishVolume and NodeUnstageVolume of what is already gone"
    ),
    case!(
        "volume.read-only",
        volume::read_only,
        "a volume published readOnly refuses writes at the target"
    ),
    case!(
        "volume.access-mode.rwo",
        volume::mode_rwo,
        "a ReadWriteOnce volume stages, publishes and takes writes"
    ),
    case!(
        "volume.access-mode.rox",
        volume::mode_rox,
        "a ReadOnlyMany volume stages and publishes, and the target is readable"
    ),
    case!(
        "volume.access-mode.rwx",
        volume::mode_rwx,
        "a ReadWriteMany volume stages, publishes and takes writes"
    ),
    case!(
        "volume.access-mode.rwop",
        volume::mode_rwop,
        "a ReadWriteOncePod volume, sent as SINGLE_NODE_SINGLE_WRITER when the driver has \
         SINGLE_NODE_MULTI_WRITER and as SINGLE_NODE_WRITER otherwise, stages, publishes and \
         takes writes"
    ),
    case!(
        "volume.mount-options",
        volume::mount_options,
        "the PV's mountOptions reach the driver as mount_flags and it publishes a usable \
         volume; each option given with --mount-option must be in effect on the target"
    ),
    case!(
        "volume.fs-group",
        volume::fs_group,
        "with CSIDriver fsGroupPolicy File, a pod fsGroup and no VOLUME_MOUNT_GROUP, the \
         volume root and a file written there belong to the fsGroup by the kubelet's chown and \
         setgid, which the driver's filesystem must keep"
    ),
    case!(
        "volume.mount-group",
        volume::mount_group,
        "with VOLUME_MOUNT_GROUP, the pod's fsGroup reaches NodeStageVolume and \
         NodePublishVolume as volume_mount_group, the driver answers OK, and where something is \
         mounted at the target the root and a file written there belong to the fsGroup (the \
         kubelet does not chown)"
    ),
    case!(
        "volume.selinux-mount",
        volume::selinux_mount,
        "with CSIDriver seLinuxMount (--selinux-mount), a ReadWriteOncePod volume's \
         NodeStageVolume and NodePublishVolume carry the pod's label as the mount flag \
         context=\"...\", the driver answers OK, and on an SELinux host where something is \
         mounted the target carries that label"
    ),
    case!(
        "volume.pod-info",
        volume::pod_info,
        "with podInfoOnMount the volume context also carries the pod's name, namespace, UID \
         and service account, and the driver still publishes"
    ),
    case!(
        "volume.secrets",
        volume::secrets,
        "with the PV's stage and publish secrets (and the controller publish secret when the \
         driver attaches), NodeStageVolume, NodePublishVolume and ControllerPublishVolume \
         carry them, the volume is usable, and no secret value shows in the suite's report"
    ),
    case!(
        "stats.usage",
        stats::usage,
        "NodeGetVolumeStats of a published volume answers bytes (and inodes) the kubelet's \
         GetMetrics accepts, with used and available no larger than the capacity"
    ),
    case!(
        "stats.condition",
        stats::condition,
        "with VOLUME_CONDITION, NodeGetVolumeStats of a published volume reports a volume \
         condition (shown in the note)"
    ),
    case!(
        "expand.online",
        stats::expand_online,
        "after ControllerExpandVolume, NodeExpandVolume of the published volume answers OK \
         and NodeGetVolumeStats then reports at least the new size"
    ),
    case!(
        "expand.offline",
        stats::expand_offline,
        "after ControllerExpandVolume of a staged volume no pod uses, NodeExpandVolume at the \
         staging path (before NodePublishVolume) answers OK, the volume then publishes usable \
         and NodeGetVolumeStats reports at least the new size"
    ),
    case!(
        "attach.controller-publish",
        attach::controller_publish,
        "ControllerPublishVolume with NodeGetInfo's node ID answers OK, again on a repeat, and \
         NOT_FOUND for an unknown node; ControllerUnpublishVolume answers OK twice"
    ),
    case!(
        "attach.limit",
        attach::limit,
        "with max_volumes_per_node N, ControllerPublishVolume of N volumes to the node \
         answers OK and of one more answers RESOURCE_EXHAUSTED"
    ),
    case!(
        "crash.uncertain-stage",
        crash::uncertain_stage,
        "NodeStageVolume whose answer is lost (the call times out after the driver did it) \
         is retried by the kubelet, and the retry answers OK",
        ["hang:NodeStageVolume"],
        true
    ),
    case!(
        "crash.uncertain-publish",
        crash::uncertain_publish,
        "NodePublishVolume whose answer is lost is retried by the kubelet, and the retry \
         answers OK with the volume usable",
        ["hang:NodePublishVolume"],
        true
    ),
    case!(
        "crash.kill-stage",
        crash::kill_stage,
        "the driver killed inside NodeStageVolume (after it staged, before its answer): the \
         call fails with no answer, the driver is restarted, and the kubelet's retry answers OK \
         with the volume usable (needs --driver-command)",
        ["kill:NodeStageVolume"],
        false
    ),
    case!(
        "crash.kill-publish",
        crash::kill_publish,
        "the driver killed inside NodePublishVolume: no answer, restarted, the retry answers \
         OK with the volume usable (needs --driver-command)",
        ["kill:NodePublishVolume"],
        false
    ),
    case!(
        "crash.kill-unpublish",
        crash::kill_unpublish,
        "the driver killed inside NodeUnpublishVolume: no answer, restarted, the retry answers \
         OK and the target is no longer mounted (needs --driver-command)",
        ["kill:NodeUnpublishVolume"],
        false
    ),
    case!(
        "crash.kill-unstage",
        crash::kill_unstage,
        "the driver killed inside NodeUnstageVolume: no answer, restarted, the retry answers \
         OK and nothing stays mounted (needs --driver-command)",
        ["kill:NodeUnstageVolume"],
        false
    ),
    case!(
        "crash.kill-expand",
        crash::kill_expand,
        "the driver killed inside NodeExpandVolume of a published volume: no answer, \
         restarted, the retry answers OK and the stats show the new size (needs \
         --driver-command)",
        ["kill:NodeExpandVolume"],
        false
    ),
    case!(
        "crash.reconstruct",
        crash::reconstruct,
        "after a kubelet restart the volume is rebuilt from vol_data.json, the driver \
         re-registers with the same node ID, and unpublishes and unstages what the old kubelet \
         set up"
    ),
    case!(
        "crash.vol-data-missing",
        crash::vol_data_missing,
        "a published volume whose pod vol_data.json is gone after a kubelet restart (the \
         kubelet can rebuild nothing from it) is unpublished at its target and unstaged at its \
         global mount path by handle alone, each call answering OK twice, and nothing stays \
         mounted"
    ),
    case!(
        "crash.vol-data-empty",
        crash::vol_data_empty,
        "the same with the pod's and the global vol_data.json 0 bytes long (a crash between \
         creating and writing them)"
    ),
];

/// Whether `name` matches `pattern`: the exact name, a group prefix (`volume` or `volume.`),
/// or a glob with `*`.
pub fn matches(pattern: &str, name: &str) -> bool {
    if !pattern.contains('*') {
        return name == pattern
            || name
                .strip_prefix(pattern.trim_end_matches('.'))
                .is_some_and(|rest| rest.starts_with('.'));
    }
    glob(pattern.as_bytes(), name.as_bytes())
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| glob(rest, &s[i..])),
        Some((c, rest)) => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_names_groups_and_globs() {
        assert!(matches("volume.block", "volume.block"));
        assert!(matches("volume", "volume.access-mode.rwo"));
        assert!(matches("volume.access-mode.", "volume.access-mode.rwo"));
        assert!(!matches("volume.b", "volume.block"));
        assert!(matches("*.rw*", "volume.access-mode.rwop"));
        assert!(!matches("crash.*-publish", "crash.uncertain-stage"));
    }

    #[test]
    fn case_names_are_unique() {
        let mut names: Vec<_> = CASES.iter().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CASES.len());
    }
}
