//! The VolumeAttachment objects, kept current by a watch (the attach/detach controller's
//! VolumeAttachment informer and lister), or by the host program from the controller's own
//! informer; only controller hosts have them.

use k8s_openapi::api::storage::v1::VolumeAttachment;

pub type VolumeAttachmentInformer = super::informer::Informer<VolumeAttachment>;

/// How a host program that runs the controller's VolumeAttachment informer keeps kcsi's current.
pub type VolumeAttachmentFeed = super::informer::Feed<VolumeAttachment>;
