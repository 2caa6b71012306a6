//! The VolumeAttachment objects, kept current by a watch (the attach/detach controller's
//! VolumeAttachment informer and lister); only controller hosts run it.

use k8s_openapi::api::storage::v1::VolumeAttachment;

pub type VolumeAttachmentInformer = super::informer::Informer<VolumeAttachment>;
