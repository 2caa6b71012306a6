//! Building the CSI `VolumeCapability` the kubelet sends (upstream `pkg/volume/csi/csi_client.go` NodeStageVolume / NodePublishVolume): block or mount access,
//! and the Kubernetes access mode mapped by whether the driver has SINGLE_NODE_MULTI_WRITER.

use crate::csi::csi_client::NodeCapabilities;
use crate::csi::proto::csi::volume_capability::access_mode::Mode;
use crate::csi::proto::csi::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
use crate::csi::proto::csi::VolumeCapability;

/// The fsType sentinel meaning "block access".
pub const FS_TYPE_BLOCK: &str = "block";

/// Maps a Kubernetes access mode (first of the PV's, `ReadWriteOnce` by default).
pub fn access_mode(k8s_mode: &str, caps: &NodeCapabilities) -> Mode {
    let multi = caps.single_node_multi_writer;
    match k8s_mode {
        "ReadWriteOnce" if multi => Mode::SingleNodeMultiWriter,
        "ReadWriteOnce" => Mode::SingleNodeWriter,
        "ReadOnlyMany" => Mode::MultiNodeReaderOnly,
        "ReadWriteMany" => Mode::MultiNodeMultiWriter,
        "ReadWriteOncePod" if multi => Mode::SingleNodeSingleWriter,
        "ReadWriteOncePod" => Mode::SingleNodeWriter,
        _ => Mode::Unknown,
    }
}

/// The capability for `fs_type` ("block" = block access), with mount flags and the volume
/// mount group (only for mount access).
pub fn volume_capability(
    k8s_mode: &str,
    caps: &NodeCapabilities,
    fs_type: &str,
    mount_flags: Vec<String>,
    volume_mount_group: Option<i64>,
) -> VolumeCapability {
    let access_type = if fs_type == FS_TYPE_BLOCK {
        AccessType::Block(BlockVolume {})
    } else {
        AccessType::Mount(MountVolume {
            fs_type: fs_type.to_string(),
            mount_flags,
            volume_mount_group: volume_mount_group
                .map(|g| g.to_string())
                .unwrap_or_default(),
        })
    };
    VolumeCapability {
        access_type: Some(access_type),
        access_mode: Some(AccessMode {
            mode: access_mode(k8s_mode, caps) as i32,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_mode_mapping_matches_upstream_table() {
        let without = NodeCapabilities::default();
        let with = NodeCapabilities {
            single_node_multi_writer: true,
            ..Default::default()
        };
        let cases = [
            (
                "ReadWriteOnce",
                Mode::SingleNodeWriter,
                Mode::SingleNodeMultiWriter,
            ),
            (
                "ReadOnlyMany",
                Mode::MultiNodeReaderOnly,
                Mode::MultiNodeReaderOnly,
            ),
            (
                "ReadWriteMany",
                Mode::MultiNodeMultiWriter,
                Mode::MultiNodeMultiWriter,
            ),
            (
                "ReadWriteOncePod",
                Mode::SingleNodeWriter,
                Mode::SingleNodeSingleWriter,
            ),
            ("", Mode::Unknown, Mode::Unknown),
        ];
        for (k8s, a, b) in cases {
            assert_eq!(access_mode(k8s, &without), a, "{k8s}");
            assert_eq!(access_mode(k8s, &with), b, "{k8s}");
        }
    }

    #[test]
    fn block_fs_type_drops_mount_fields() {
        let cap = volume_capability(
            "ReadWriteOnce",
            &NodeCapabilities::default(),
            "block",
            vec!["ro".into()],
            Some(3000),
        );
        assert!(matches!(cap.access_type, Some(AccessType::Block(_))));
        let cap = volume_capability(
            "ReadWriteOnce",
            &NodeCapabilities::default(),
            "ext4",
            vec![],
            Some(3000),
        );
        let Some(AccessType::Mount(m)) = cap.access_type else {
            panic!()
        };
        assert_eq!(m.volume_mount_group, "3000");
    }
}
