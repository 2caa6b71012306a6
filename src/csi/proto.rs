//! Generated gRPC code for CSI v1 and the kubelet's plugin registration service, plus the
//! `Debug` impls prost was told not to derive: requests with `csi_secret` fields (and tokens in
//! `volume_context`) must never print their values.

#[allow(clippy::all, clippy::pedantic)]
pub mod csi {
    tonic::include_proto!("csi.v1");
}

#[allow(clippy::all, clippy::pedantic)]
pub mod registration {
    tonic::include_proto!("pluginregistration");
}

use std::collections::HashMap;
use std::fmt;

/// The volume_context key that carries service-account tokens.
pub const TOKENS_KEY: &str = "csi.storage.k8s.io/serviceAccount.tokens";

/// Prints a secrets map's keys only.
struct Redacted<'a>(&'a HashMap<String, String>);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut keys: Vec<&String> = self.0.keys().collect();
        keys.sort();
        f.debug_map()
            .entries(keys.into_iter().map(|k| (k, "<redacted>")))
            .finish()
    }
}

/// Prints a volume context with service-account tokens redacted.
struct Context<'a>(&'a HashMap<String, String>);

impl fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut entries: Vec<(&String, &String)> = self.0.iter().collect();
        entries.sort();
        f.debug_map()
            .entries(entries.into_iter().map(|(k, v)| {
                (
                    k,
                    if k == TOKENS_KEY {
                        "<redacted>"
                    } else {
                        v.as_str()
                    },
                )
            }))
            .finish()
    }
}

impl fmt::Debug for csi::NodeStageVolumeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeStageVolumeRequest")
            .field("volume_id", &self.volume_id)
            .field("publish_context", &self.publish_context)
            .field("staging_target_path", &self.staging_target_path)
            .field("volume_capability", &self.volume_capability)
            .field("secrets", &Redacted(&self.secrets))
            .field("volume_context", &Context(&self.volume_context))
            .finish()
    }
}

impl fmt::Debug for csi::NodePublishVolumeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodePublishVolumeRequest")
            .field("volume_id", &self.volume_id)
            .field("publish_context", &self.publish_context)
            .field("staging_target_path", &self.staging_target_path)
            .field("target_path", &self.target_path)
            .field("volume_capability", &self.volume_capability)
            .field("readonly", &self.readonly)
            .field("secrets", &Redacted(&self.secrets))
            .field("volume_context", &Context(&self.volume_context))
            .finish()
    }
}

impl fmt::Debug for csi::NodeExpandVolumeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeExpandVolumeRequest")
            .field("volume_id", &self.volume_id)
            .field("volume_path", &self.volume_path)
            .field("capacity_range", &self.capacity_range)
            .field("staging_target_path", &self.staging_target_path)
            .field("volume_capability", &self.volume_capability)
            .field("secrets", &Redacted(&self.secrets))
            .finish()
    }
}

impl fmt::Debug for csi::CreateVolumeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreateVolumeRequest")
            .field("name", &self.name)
            .field("capacity_range", &self.capacity_range)
            .field("volume_capabilities", &self.volume_capabilities)
            .field("parameters", &self.parameters)
            .field("secrets", &Redacted(&self.secrets))
            .finish()
    }
}

impl fmt::Debug for csi::DeleteVolumeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeleteVolumeRequest")
            .field("volume_id", &self.volume_id)
            .field("secrets", &Redacted(&self.secrets))
            .finish()
    }
}

impl fmt::Debug for csi::ControllerExpandVolumeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerExpandVolumeRequest")
            .field("volume_id", &self.volume_id)
            .field("capacity_range", &self.capacity_range)
            .field("secrets", &Redacted(&self.secrets))
            .field("volume_capability", &self.volume_capability)
            .finish()
    }
}

impl fmt::Debug for csi::ControllerPublishVolumeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerPublishVolumeRequest")
            .field("volume_id", &self.volume_id)
            .field("node_id", &self.node_id)
            .field("volume_capability", &self.volume_capability)
            .field("readonly", &self.readonly)
            .field("secrets", &Redacted(&self.secrets))
            .field("volume_context", &Context(&self.volume_context))
            .finish()
    }
}

impl fmt::Debug for csi::ControllerUnpublishVolumeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerUnpublishVolumeRequest")
            .field("volume_id", &self.volume_id)
            .field("node_id", &self.node_id)
            .field("secrets", &Redacted(&self.secrets))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages with a `csi_secret` field in proto/csi.proto.
    fn secret_messages() -> Vec<String> {
        let proto = include_str!("../../proto/csi.proto");
        let mut current = "";
        let mut found = Vec::new();
        for line in proto.lines() {
            if let Some(rest) = line.strip_prefix("message ") {
                current = rest.split_whitespace().next().unwrap_or("");
            }
            if line.contains("(csi_secret) = true") && !found.iter().any(|m| m == current) {
                found.push(current.to_string());
            }
        }
        found.sort();
        found
    }

    #[test]
    fn every_secret_carrying_request_prints_its_secrets_redacted() {
        let secrets = || HashMap::from([("password".to_string(), "hunter2".to_string())]);
        let printed = [
            (
                "ControllerExpandVolumeRequest",
                format!(
                    "{:?}",
                    csi::ControllerExpandVolumeRequest {
                        secrets: secrets(),
                        ..Default::default()
                    }
                ),
            ),
            (
                "ControllerPublishVolumeRequest",
                format!(
                    "{:?}",
                    csi::ControllerPublishVolumeRequest {
                        secrets: secrets(),
                        ..Default::default()
                    }
                ),
            ),
            (
                "ControllerUnpublishVolumeRequest",
                format!(
                    "{:?}",
                    csi::ControllerUnpublishVolumeRequest {
                        secrets: secrets(),
                        ..Default::default()
                    }
                ),
            ),
            (
                "CreateVolumeRequest",
                format!(
                    "{:?}",
                    csi::CreateVolumeRequest {
                        secrets: secrets(),
                        ..Default::default()
                    }
                ),
            ),
            (
                "DeleteVolumeRequest",
                format!(
                    "{:?}",
                    csi::DeleteVolumeRequest {
                        secrets: secrets(),
                        ..Default::default()
                    }
                ),
            ),
            (
                "NodeExpandVolumeRequest",
                format!(
                    "{:?}",
                    csi::NodeExpandVolumeRequest {
                        secrets: secrets(),
                        ..Default::default()
                    }
                ),
            ),
            (
                "NodePublishVolumeRequest",
                format!(
                    "{:?}",
                    csi::NodePublishVolumeRequest {
                        secrets: secrets(),
                        ..Default::default()
                    }
                ),
            ),
            (
                "NodeStageVolumeRequest",
                format!(
                    "{:?}",
                    csi::NodeStageVolumeRequest {
                        secrets: secrets(),
                        ..Default::default()
                    }
                ),
            ),
        ];
        let names: Vec<String> = printed.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(
            names,
            secret_messages(),
            "a csi_secret message without a redacting Debug"
        );
        for (name, text) in printed {
            assert!(!text.contains("hunter2"), "{name}: {text}");
            assert!(
                text.contains("\"password\": \"<redacted>\""),
                "{name}: {text}"
            );
        }
    }

    #[test]
    fn staging_prints_tokens_in_volume_context_redacted() {
        let req = csi::NodeStageVolumeRequest {
            volume_context: HashMap::from([(TOKENS_KEY.into(), "tok-456".into())]),
            ..Default::default()
        };
        assert!(!format!("{req:?}").contains("tok-456"));
    }

    #[test]
    fn debug_never_prints_secrets_or_tokens() {
        let req = csi::NodePublishVolumeRequest {
            volume_id: "v1".into(),
            secrets: HashMap::from([("password".into(), "hunter2".into())]),
            volume_context: HashMap::from([
                (
                    TOKENS_KEY.into(),
                    "{\"aud\":{\"token\":\"tok-123\"}}".into(),
                ),
                ("size".into(), "1Gi".into()),
            ]),
            ..Default::default()
        };
        let text = format!("{req:?}");
        assert!(
            !text.contains("hunter2") && !text.contains("tok-123"),
            "{text}"
        );
        assert!(text.contains("password") && text.contains("1Gi"));
    }
}
