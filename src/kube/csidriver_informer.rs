//! The CSIDriver objects, kept current by a watch (upstream's CSIDriver informer and lister).

use k8s_openapi::api::storage::v1::CSIDriver;

pub type CsiDriverInformer = super::informer::Informer<CSIDriver>;
