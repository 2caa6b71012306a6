//! The CSIDriver objects, kept current by a watch (upstream's CSIDriver informer and lister),
//! or by the host program from its own informer.

use k8s_openapi::api::storage::v1::CSIDriver;

pub type CsiDriverInformer = super::informer::Informer<CSIDriver>;

/// How a host program that runs a CSIDriver informer of its own keeps kcsi's current.
pub type CsiDriverFeed = super::informer::Feed<CSIDriver>;
