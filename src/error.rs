//! kcsi's one error type: a stable kind (which the C layer maps to `kcsi_result`), a class that
//! mirrors the kubelet operation executor's view of the failure, an optional gRPC code and a
//! message naming what failed with which input.

use std::fmt;

/// What went wrong, as a stable category. The C API's result numbers are derived from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    InvalidArgument,
    NotFound,
    AlreadyExists,
    UnsupportedVersion,
    Driver,
    Kubernetes,
    Io,
    Timeout,
    NotSupported,
    Unavailable,
    FailedPrecondition,
    Internal,
}

/// How the volume manager must treat the failure (upstream `pkg/volume/util/types`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The operation finished with an error.
    Final,
    /// The operation may still be running in the driver: treat the volume as possibly mounted.
    Uncertain,
    /// Nothing changed; retry later (e.g. the driver is not registered yet).
    Transient,
}

/// Built once, then only refined through the builder methods below; read through accessors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    class: ErrorClass,
    /// The gRPC status code, only when a CSI driver returned one.
    grpc_code: Option<i32>,
    message: String,
    /// The message as upstream's plugin words it, when kcsi's adds context upstream's lacks
    /// (which driver, at which socket): what the kubelet and the attach/detach controller
    /// show users in events and conditions.
    upstream: Option<String>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            class: ErrorClass::Final,
            grpc_code: None,
            message: message.into(),
            upstream: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    pub fn io(context: impl fmt::Display, err: &std::io::Error) -> Self {
        Self::new(ErrorKind::Io, format!("{context}: {err}"))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn class(&self) -> ErrorClass {
        self.class
    }

    pub fn grpc_code(&self) -> Option<i32> {
        self.grpc_code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The message as upstream's plugin (`pkg/volume/csi`) words it.
    pub fn upstream_message(&self) -> &str {
        self.upstream.as_deref().unwrap_or(&self.message)
    }

    /// Sets how upstream's plugin words this failure.
    pub fn with_upstream_message(mut self, text: impl Into<String>) -> Self {
        self.upstream = Some(text.into());
        self
    }

    pub fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// Replaces the message (upstream's wording too), keeping kind, class and code.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self.upstream = None;
        self
    }

    pub fn with_grpc_code(mut self, code: i32) -> Self {
        self.grpc_code = Some(code);
        self
    }

    pub fn with_class(mut self, class: ErrorClass) -> Self {
        self.class = class;
        self
    }

    pub fn transient(self) -> Self {
        self.with_class(ErrorClass::Transient)
    }

    pub fn uncertain(self) -> Self {
        self.with_class(ErrorClass::Uncertain)
    }

    pub fn is_transient(&self) -> bool {
        self.class == ErrorClass::Transient
    }

    pub fn is_uncertain(&self) -> bool {
        self.class == ErrorClass::Uncertain
    }

    /// Prefixes the message with what the caller was doing, keeping kind, class and code.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        if let Some(up) = &mut self.upstream {
            *up = format!("{what}: {up}");
        }
        self
    }

    /// Prepends `text` to the message as is (upstream's `errors.New(log("..." + err.Error()))`
    /// shapes, which join without a colon).
    pub fn prefix(mut self, text: impl fmt::Display) -> Self {
        self.message = format!("{text}{}", self.message);
        if let Some(up) = &mut self.upstream {
            *up = format!("{text}{up}");
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_wording_follows_the_context_upstream_adds_too() {
        let e = Error::new(
            ErrorKind::Driver,
            "X to CSI driver \"d\" at /s failed: rpc error",
        )
        .with_upstream_message("rpc error")
        .context("op")
        .prefix("kubernetes.io/csi: ");
        assert_eq!(
            e.message(),
            "kubernetes.io/csi: op: X to CSI driver \"d\" at /s failed: rpc error"
        );
        assert_eq!(e.upstream_message(), "kubernetes.io/csi: op: rpc error");
    }

    #[test]
    fn without_its_own_wording_upstream_reads_kcsi_message() {
        let e = Error::invalid("bad").context("op");
        assert_eq!(e.upstream_message(), "op: bad");
        let e = Error::invalid("bad")
            .with_upstream_message("other")
            .with_message("replaced");
        assert_eq!(e.upstream_message(), "replaced");
    }
}
